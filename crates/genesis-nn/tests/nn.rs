//! Modules, losses, initialisers, optimisers and schedules against values computed here on
//! the host in f64 (PyTorch's formulas), and the digits classifier's accuracy.

use std::collections::BTreeMap;

use genesis::{ConvOptions, PoolOptions};
use genesis::{DType, Device, Error, Generator, Tensor, no_grad};
use genesis_nn::loss::{self, CrossEntropy, Reduction, Target};
use genesis_nn::optim::{
    Adam, CosineWithWarmup, Optimizer, Schedule, Sgd, StepLr, clip_grad_norm_,
};
use genesis_nn::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose2d,
    Dropout, Elu, Embedding, Flatten, Gelu, GroupNorm, Hardsigmoid, Hardswish, LayerNorm,
    LeakyRelu, Linear, MaxPool2d, Mish, Module, RMSNorm, Relu, Relu6, Selu, Sequential, Sigmoid,
    Softmax, init,
};

const CPU: Device = Device::Cpu;

fn vec32(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn close(a: &[f32], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (*x as f64 - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn the_digits_classifier_reaches_95_percent() {
    let run = genesis_nn::train::train_digits(CPU, 20, 0).unwrap();
    assert!(
        run.test_accuracy >= 0.95,
        "test accuracy {:.4}",
        run.test_accuracy
    );
    let first = run.losses[0];
    let last = *run.losses.last().unwrap();
    assert!(first > 2.0 && last < 0.3, "losses {first} .. {last}");
}

#[test]
fn the_convolutional_digits_classifier_reaches_95_percent() {
    let run = genesis_nn::train::train_digits_cnn(CPU, 6, 0).unwrap();
    assert!(
        run.test_accuracy >= 0.95,
        "test accuracy {:.4}",
        run.test_accuracy
    );
    let first = run.losses[0];
    let last = *run.losses.last().unwrap();
    assert!(first > 2.0 && last < 0.3, "losses {first} .. {last}");
}

/// The convolution layers: PyTorch's parameter names, shapes and initialisation bounds
/// (`±1/√(in / groups · k...)`), the forward of the tensor op, the pooling and flatten
/// layers, and the arguments refused.
#[test]
fn convolution_layers_as_pytorchs() {
    let g = Generator::new(3);
    let o = ConvOptions::new().padding(1).groups(2);
    let conv = Conv2d::new(4, 6, [3, 2], o, true, &g, CPU).unwrap();
    let p = conv.named_parameters();
    assert_eq!(p[0].0, "weight");
    assert_eq!(p[0].1.shape(), [6, 2, 3, 2]);
    assert_eq!(p[1].0, "bias");
    assert_eq!(p[1].1.shape(), [6]);
    let bound = 1.0 / (2.0f32 * 3.0 * 2.0).sqrt();
    for (_, t) in &p {
        let v = vec32(t);
        assert!(v.iter().all(|x| x.abs() <= bound), "{v:?}");
        assert!(v.iter().any(|x| x.abs() > bound / 2.0));
        assert!(t.requires_grad() && t.is_leaf());
    }
    let x = g.randn([2, 4, 5, 5], DType::F32, CPU).unwrap();
    let y = conv.forward(&x).unwrap();
    assert_eq!(y.shape(), [2, 6, 5, 6]);
    assert_eq!(
        vec32(&y),
        vec32(&x.conv2d(&conv.weight, conv.bias.as_ref(), o).unwrap())
    );
    let c1 = Conv1d::new(4, 2, 3, ConvOptions::new().stride(2), false, &g, CPU).unwrap();
    assert!(c1.bias.is_none());
    assert_eq!(c1.named_parameters().len(), 1);
    let s = c1
        .forward(&g.randn([3, 4, 9], DType::F32, CPU).unwrap())
        .unwrap();
    assert_eq!(s.shape(), [3, 2, 4]);
    let net = Sequential::new()
        .add(conv)
        .add(Relu)
        .add(MaxPool2d::new(2, PoolOptions::new().ceil_mode(true)))
        .add(AvgPool2d::new(
            [3, 2],
            PoolOptions::new().stride(1).padding([1, 0]),
        ))
        .add(AdaptiveAvgPool2d::new([2, 1]))
        .add(Flatten::default());
    let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias"]);
    assert_eq!(net.forward(&x).unwrap().shape(), [2, 6 * 2]);
    net.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
    // Transposed: [in, out / groups, k...], fan in = out / groups · taps; it undoes the
    // shape of the strided convolution.
    let up = ConvTranspose2d::new(
        6,
        4,
        3,
        ConvOptions::new().groups(2).stride(2),
        true,
        &g,
        CPU,
    )
    .unwrap();
    assert_eq!(up.weight.shape(), [6, 2, 3, 3]);
    let bound = 1.0 / (2.0f32 * 9.0).sqrt();
    assert!(vec32(&up.weight).iter().all(|x| x.abs() <= bound));
    let z = up.forward(&y.narrow(3, 0, 5).unwrap()).unwrap();
    assert_eq!(z.shape(), [2, 4, 11, 11]);
    // Group normalisation and the activation layers are their tensor ops.
    let gn = GroupNorm::new(2, 6, 1e-5, true, CPU).unwrap();
    let names: Vec<String> = gn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    assert!(GroupNorm::new(4, 6, 1e-5, true, CPU).is_err());
    assert!(
        GroupNorm::new(2, 6, 1e-5, false, CPU)
            .unwrap()
            .named_parameters()
            .is_empty()
    );
    let z = g.randn([2, 6, 3], DType::F32, CPU).unwrap();
    assert_eq!(
        vec32(&gn.forward(&z).unwrap()),
        vec32(
            &z.group_norm(2, gn.weight.as_ref(), gn.bias.as_ref(), 1e-5)
                .unwrap()
        )
    );
    let acts: [(&dyn Module, Tensor); 9] = [
        (&LeakyRelu::default(), z.leaky_relu(0.01).unwrap()),
        (&Elu::default(), z.elu(1.0).unwrap()),
        (&Selu, z.selu().unwrap()),
        (&Relu6, z.relu6().unwrap()),
        (&Hardsigmoid, z.hardsigmoid().unwrap()),
        (&Hardswish, z.hardswish().unwrap()),
        (&Mish, z.mish().unwrap()),
        (&Sigmoid, z.sigmoid().unwrap()),
        (&Softmax { dim: -1 }, z.softmax(-1).unwrap()),
    ];
    for (m, want) in acts {
        assert_eq!(vec32(&m.forward(&z).unwrap()), vec32(&want));
        assert!(m.named_parameters().is_empty());
    }
    // Refused: channels that the groups do not divide, a kernel of no taps.
    assert!(Conv2d::new(3, 6, 3, ConvOptions::new().groups(2), true, &g, CPU).is_err());
    assert!(Conv2d::new(4, 6, 3, ConvOptions::new().groups(0), true, &g, CPU).is_err());
    assert!(Conv2d::new(4, 6, [0, 3], ConvOptions::new(), true, &g, CPU).is_err());
    assert!(Conv1d::new(4, 6, 0, ConvOptions::new(), true, &g, CPU).is_err());
}

/// Batch normalisation layers: PyTorch's parameter and buffer names, the running statistics
/// moved by training batches (momentum 0.1, or the cumulative average), evaluation by them,
/// and the ranks each layer takes.
#[test]
fn batch_norm_layers_as_pytorchs() {
    let g = Generator::new(4);
    let mut bn = BatchNorm2d::new(3, CPU).unwrap();
    let names: Vec<String> = bn.state_dict().into_keys().collect();
    assert_eq!(
        names,
        [
            "bias",
            "num_batches_tracked",
            "running_mean",
            "running_var",
            "weight"
        ]
    );
    let x = g
        .randn([4, 3, 2, 2], DType::F32, CPU)
        .unwrap()
        .mul(3.0)
        .unwrap()
        .add(1.0)
        .unwrap();
    let mean: Vec<f64> = vec32(&x.mean_dim([0isize, 2, 3], false).unwrap())
        .iter()
        .map(|&v| v as f64)
        .collect();
    let y = bn.forward(&x).unwrap();
    let ym = vec32(&y.mean_dim([0isize, 2, 3], false).unwrap());
    assert!(ym.iter().all(|v| v.abs() < 1e-5), "{ym:?}");
    let want: Vec<f64> = mean.iter().map(|m| 0.1 * m).collect();
    close(
        &vec32(bn.running_mean().unwrap()),
        &want,
        1e-5,
        "running mean",
    );
    assert_eq!(
        bn.state_dict()["num_batches_tracked"]
            .item::<i64>()
            .unwrap(),
        1
    );
    y.sum().unwrap().backward().unwrap();
    assert!(bn.weight().unwrap().grad().is_some());
    // Evaluation: the running statistics, nothing moves.
    bn.eval();
    let before = vec32(bn.running_mean().unwrap());
    let z = bn.forward(&x).unwrap();
    let rv = vec32(bn.running_var().unwrap());
    let want: Vec<f64> = vec32(&x)
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / 4) % 3;
            (v as f64 - before[ch] as f64) / (rv[ch] as f64 + 1e-5).sqrt()
        })
        .collect();
    close(&vec32(&z), &want, 1e-5, "evaluation");
    assert_eq!(vec32(bn.running_mean().unwrap()), before);
    assert_eq!(
        bn.state_dict()["num_batches_tracked"]
            .item::<i64>()
            .unwrap(),
        1
    );
    // momentum None: the cumulative average of the batches' means.
    let cma = BatchNorm1d::with(2, 1e-5, None, false, true, CPU).unwrap();
    assert!(cma.named_parameters().is_empty());
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], CPU).unwrap();
    let b = Tensor::from_slice(&[5.0f32, 6.0, 7.0, 8.0], [2, 2], CPU).unwrap();
    cma.forward(&a).unwrap();
    cma.forward(&b).unwrap();
    assert_eq!(vec32(cma.running_mean().unwrap()), [4.0, 5.0]);
    // Ranks.
    assert!(bn.forward(&a).is_err());
    assert!(cma.forward(&x).is_err());
    assert!(cma.forward(&a.unsqueeze(2).unwrap()).is_ok());
    // Without running statistics, evaluation normalises by the batch.
    let mut free = BatchNorm1d::with(2, 1e-5, Some(0.1), true, false, CPU).unwrap();
    free.eval();
    assert!(free.named_buffers().is_empty());
    let f = vec32(&free.forward(&b).unwrap());
    close(&f, &[-1.0, -1.0, 1.0, 1.0], 1e-5, "batch statistics");
}

/// Mini-batches: every sample once an epoch, the rows of every tensor together, a new order
/// each shuffled epoch (the same for the same seed), `drop_last`, and the refusals.
#[test]
fn data_loader_batches_as_pytorchs() {
    use genesis_nn::data::DataLoader;
    let n = 23;
    let x = Tensor::arange(0.0, (2 * n) as f64, 1.0, DType::F64, CPU)
        .unwrap()
        .reshape([n, 2])
        .unwrap();
    let y = Tensor::arange(0.0, n as f64, 1.0, DType::I64, CPU).unwrap();
    let order = |l: &DataLoader<'_>| -> Vec<i64> {
        let mut seen = Vec::new();
        for b in l.epoch().unwrap() {
            let b = b.unwrap();
            let (xs, ys) = (b[0].to_vec::<f64>().unwrap(), b[1].to_vec::<i64>().unwrap());
            for (i, &label) in ys.iter().enumerate() {
                // Row `label` of x is [2 label, 2 label + 1].
                assert_eq!(xs[2 * i], 2.0 * label as f64);
                assert_eq!(xs[2 * i + 1], 2.0 * label as f64 + 1.0);
            }
            seen.extend(ys);
        }
        seen
    };
    let plain = DataLoader::new(&[&x, &y], 5).unwrap();
    assert_eq!((plain.len(), plain.batches()), (23, 5));
    assert_eq!(order(&plain), (0..23).collect::<Vec<i64>>());
    let g7 = Generator::new(7);
    let shuffled = DataLoader::new(&[&x, &y], 5).unwrap().shuffle(&g7);
    let (a, b) = (order(&shuffled), order(&shuffled));
    assert_ne!(a, b, "each epoch draws a new order");
    for e in [&a, &b] {
        let mut sorted = e.clone();
        sorted.sort();
        assert_eq!(sorted, (0..23).collect::<Vec<i64>>());
    }
    let again_g = Generator::new(7);
    let again = DataLoader::new(&[&x, &y], 5).unwrap().shuffle(&again_g);
    assert_eq!(order(&again), a, "the same seed gives the same orders");
    let dropped = DataLoader::new(&[&x, &y], 5).unwrap().drop_last(true);
    assert_eq!(dropped.batches(), 4);
    assert_eq!(order(&dropped).len(), 20);
    // Refused: no tensors, batch size 0, lengths that differ, a 0-d tensor.
    assert!(DataLoader::new(&[], 5).is_err());
    assert!(DataLoader::new(&[&x], 0).is_err());
    assert!(DataLoader::new(&[&x, &y.narrow(0, 0, 3).unwrap()], 5).is_err());
    let s = Tensor::zeros([0usize; 0], DType::F32, CPU).unwrap();
    assert!(DataLoader::new(&[&s], 1).is_err());
    // An empty data set has no batches.
    let e = DataLoader::new(&[&x.narrow(0, 0, 0).unwrap()], 4).unwrap();
    assert!(e.is_empty() && e.epoch().unwrap().next().is_none());
}

/// Multi-head attention against its definition by loops in float64 (every layout, biases or
/// none, key padding and attention masks, bool and float), the weights averaged over the
/// heads, the two paths (flash-style without weights, composed with them) giving one
/// gradient, PyTorch's parameter names and the refusals.
#[test]
fn multihead_attention_as_pytorchs() {
    use genesis_nn::MultiheadAttention;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let mut rng = SmallRng::seed_from_u64(9);
    for case in 0..24 {
        let (e, h) = ([4, 6, 8][case % 3], [1, 2][case / 3 % 2]);
        let (n, l, s) = (
            rng.random_range(1..3),
            rng.random_range(1..4),
            rng.random_range(1..5),
        );
        let (bias, batch_first, unbatched) = (case % 2 == 0, case / 6 % 2 == 0, case % 5 == 0);
        let g = Generator::new(case as u64);
        let mut mha = MultiheadAttention::new(e, h, bias, batch_first, &g, CPU).unwrap();
        // float64 parameters, drawn afresh (the biases non-zero).
        let p64 = |t: &Tensor, rng: &mut SmallRng| {
            let v: Vec<f64> = (0..t.numel())
                .map(|_| rng.random_range(-0.5..0.5))
                .collect();
            Tensor::from_slice(&v, t.shape(), CPU)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        };
        mha.in_proj_weight = p64(&mha.in_proj_weight, &mut rng);
        mha.in_proj_bias = mha.in_proj_bias.as_ref().map(|b| p64(b, &mut rng));
        mha.out_proj.weight = p64(&mha.out_proj.weight, &mut rng);
        mha.out_proj.bias = mha.out_proj.bias.as_ref().map(|b| p64(b, &mut rng));
        let n_eff = if unbatched { 1 } else { n };
        let draw = |len: usize, rng: &mut SmallRng| -> Vec<f64> {
            (0..n_eff * len * e)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        // Row-major [N, T, E] values; the tensors in the layer's layout.
        let (qv, kv, vv) = (draw(l, &mut rng), draw(s, &mut rng), draw(s, &mut rng));
        let as_input = |v: &[f64], len: usize| {
            let t = Tensor::from_slice(v, [n_eff, len, e], CPU).unwrap();
            if unbatched {
                t.squeeze(0).unwrap()
            } else if batch_first {
                t
            } else {
                t.transpose(0, 1).unwrap().contiguous().unwrap()
            }
        };
        let (qt, kt, vt) = (as_input(&qv, l), as_input(&kv, s), as_input(&vv, s));
        // Masks: keys padded out (never all of a row's), and an additive float mask.
        let pad: Vec<bool> = (0..n_eff * s)
            .map(|i| i % s != 0 && rng.random_bool(0.3))
            .collect();
        let fmask: Vec<f64> = (0..l * s).map(|_| rng.random_range(-1.0..1.0)).collect();
        let pad_t = Tensor::from_bools(&pad, if unbatched { vec![s] } else { vec![n_eff, s] }, CPU)
            .unwrap();
        let fmask_t = Tensor::from_slice(&fmask, [l, s], CPU).unwrap();
        let vals = |t: &Tensor| t.to_vec::<f64>().unwrap();
        let (w_in, w_out) = (vals(&mha.in_proj_weight), vals(&mha.out_proj.weight));
        let b_in = mha
            .in_proj_bias
            .as_ref()
            .map(vals)
            .unwrap_or(vec![0.0; 3 * e]);
        let b_out = mha.out_proj.bias.as_ref().map(vals).unwrap_or(vec![0.0; e]);
        let d = e / h;
        let lin = |x: &[f64], w: &[f64], b: &[f64], rows: usize, off: usize| -> Vec<f64> {
            (0..rows)
                .flat_map(|r| {
                    (0..e).map(move |o| {
                        b[off + o]
                            + (0..e)
                                .map(|i| x[r * e + i] * w[(off + o) * e + i])
                                .sum::<f64>()
                    })
                })
                .collect()
        };
        for masked in [false, true] {
            let mut want = vec![0.0; n_eff * l * e];
            let mut want_w = vec![0.0; n_eff * l * s];
            for b in 0..n_eff {
                let q = lin(&qv[b * l * e..], &w_in, &b_in, l, 0);
                let k = lin(&kv[b * s * e..], &w_in, &b_in, s, e);
                let v = lin(&vv[b * s * e..], &w_in, &b_in, s, 2 * e);
                let mut heads = vec![0.0; l * e];
                for hh in 0..h {
                    for i in 0..l {
                        let mut sc: Vec<f64> = (0..s)
                            .map(|j| {
                                let dot: f64 = (0..d)
                                    .map(|c| q[i * e + hh * d + c] * k[j * e + hh * d + c])
                                    .sum();
                                let mut v = dot / (d as f64).sqrt();
                                if masked {
                                    v += fmask[i * s + j];
                                    if pad[b * s + j] {
                                        v = f64::NEG_INFINITY;
                                    }
                                }
                                v
                            })
                            .collect();
                        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = sc.iter().map(|v| (v - m).exp()).sum();
                        sc.iter_mut().for_each(|v| *v = (*v - m).exp() / z);
                        for j in 0..s {
                            want_w[(b * l + i) * s + j] += sc[j] / h as f64;
                            for c in 0..d {
                                heads[i * e + hh * d + c] += sc[j] * v[j * e + hh * d + c];
                            }
                        }
                    }
                }
                let y = lin(&heads, &w_out, &b_out, l, 0);
                want[b * l * e..(b + 1) * l * e].copy_from_slice(&y);
            }
            let (kpm, am) = if masked {
                (Some(&pad_t), Some(&fmask_t))
            } else {
                (None, None)
            };
            for need in [false, true] {
                let (y, w) = mha.attend(&qt, &kt, &vt, kpm, am, need).unwrap();
                let y = if unbatched || batch_first {
                    y
                } else {
                    y.transpose(0, 1).unwrap()
                };
                let got = y.contiguous().unwrap().to_vec::<f64>().unwrap();
                let what = format!(
                    "case {case} e {e} h {h} n {n_eff} l {l} s {s} masked {masked} weights {need}"
                );
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() < 1e-12, "{what}: {got:?} vs {want:?}");
                }
                match w {
                    Some(w) => {
                        let w = w.to_vec::<f64>().unwrap();
                        for (a, b) in w.iter().zip(&want_w) {
                            assert!((a - b).abs() < 1e-12, "{what} weights");
                        }
                    }
                    None => assert!(!need, "{what}: no weights"),
                }
            }
        }
        // The two paths give one gradient.
        let grads = |need: bool| -> Vec<f64> {
            mha.in_proj_weight.zero_grad();
            let (y, _) = mha.attend(&qt, &kt, &vt, None, None, need).unwrap();
            y.sum().unwrap().backward().unwrap();
            mha.in_proj_weight.grad().unwrap().to_vec::<f64>().unwrap()
        };
        let (a, b) = (grads(false), grads(true));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-10, "case {case}: gradients {x} vs {y}");
        }
    }
    // Names and refusals.
    let g = Generator::new(0);
    let mha = MultiheadAttention::new(8, 2, true, true, &g, CPU).unwrap();
    let names: Vec<String> = mha.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "in_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias"
        ]
    );
    assert!(MultiheadAttention::new(8, 3, true, true, &g, CPU).is_err());
    assert!(MultiheadAttention::new(8, 0, true, true, &g, CPU).is_err());
    let x = g.randn([2, 3, 8], DType::F32, CPU).unwrap();
    assert!(
        mha.forward(&g.randn([2, 3, 7], DType::F32, CPU).unwrap())
            .is_err()
    );
    let bad_mask = Tensor::from_bools(&[false; 4], [2, 2], CPU).unwrap();
    assert!(
        mha.attend(&x, &x, &x, Some(&bad_mask), None, false)
            .is_err()
    );
    assert!(
        mha.attend(&x, &x, &x, None, Some(&bad_mask), false)
            .is_err()
    );
    assert!(
        mha.attend(&x, &x.narrow(1, 0, 2).unwrap(), &x, None, None, false)
            .is_err()
    );
}

/// LSTM and GRU (float32) against their recurrences by loops in float64 (layers, biases,
/// layouts, initial states), their gradients against central differences of the loops,
/// PyTorch's parameter names and the refusals.
#[test]
fn recurrent_layers_as_pytorchs() {
    use genesis_nn::{Gru, Lstm, RnnOutput};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    enum Net {
        L(Lstm),
        G(Gru),
    }
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let mut rng = SmallRng::seed_from_u64(12);
    for case in 0..16 {
        let lstm = case % 2 == 0;
        let (inp, h, layers) = (
            rng.random_range(1..4),
            rng.random_range(1..4),
            1 + case / 2 % 2,
        );
        let (steps, n) = (rng.random_range(1..5), rng.random_range(1..3));
        let (bias, batch_first, unbatched) = (case % 3 != 0, case / 4 % 2 == 0, case % 5 == 0);
        let n_eff = if unbatched { 1 } else { n };
        let g = Generator::new(case as u64);
        let net = if lstm {
            Net::L(Lstm::new(inp, h, layers, bias, batch_first, &g, CPU).unwrap())
        } else {
            Net::G(Gru::new(inp, h, layers, bias, batch_first, &g, CPU).unwrap())
        };
        let module: &dyn Module = match &net {
            Net::L(l) => l,
            Net::G(g) => g,
        };
        let names: Vec<String> = module
            .named_parameters()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let mut want_names = Vec::new();
        for k in 0..layers {
            want_names.push(format!("weight_ih_l{k}"));
            want_names.push(format!("weight_hh_l{k}"));
            if bias {
                want_names.push(format!("bias_ih_l{k}"));
                want_names.push(format!("bias_hh_l{k}"));
            }
        }
        assert_eq!(names, want_names);
        // float32 values (the layer's dtype), computed on in float64 by the loops.
        let mut draw = |len: usize| -> Vec<f64> {
            (0..len)
                .map(|_| rng.random_range(-1.0f32..1.0) as f64)
                .collect()
        };
        let (x, h0, c0) = (
            draw(steps * n_eff * inp),
            draw(layers * n_eff * h),
            draw(layers * n_eff * h),
        );
        let gates = if lstm { 4 } else { 3 };
        // The recurrences by loops: x is [L, N, in] row-major.
        let reference = |params: &BTreeMap<String, Vec<f64>>| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
            let mut seq = x.clone();
            let mut width = inp;
            let (mut hn, mut cn) = (Vec::new(), Vec::new());
            for k in 0..layers {
                let w_ih = &params[&format!("weight_ih_l{k}")];
                let w_hh = &params[&format!("weight_hh_l{k}")];
                let zero = vec![0.0; gates * h];
                let b_ih = params.get(&format!("bias_ih_l{k}")).unwrap_or(&zero);
                let b_hh = params.get(&format!("bias_hh_l{k}")).unwrap_or(&zero);
                let mut out = Vec::new();
                let mut hs: Vec<Vec<f64>> = (0..n_eff)
                    .map(|b| h0[(k * n_eff + b) * h..][..h].to_vec())
                    .collect();
                let mut cs: Vec<Vec<f64>> = (0..n_eff)
                    .map(|b| c0[(k * n_eff + b) * h..][..h].to_vec())
                    .collect();
                for t in 0..steps {
                    for b in 0..n_eff {
                        let xt = &seq[(t * n_eff + b) * width..][..width];
                        let pre = |w: &[f64], bb: &[f64], v: &[f64], cols: usize, row: usize| {
                            bb[row] + (0..cols).map(|c| w[row * cols + c] * v[c]).sum::<f64>()
                        };
                        let xg: Vec<f64> = (0..gates * h)
                            .map(|r| pre(w_ih, b_ih, xt, width, r))
                            .collect();
                        let hg: Vec<f64> = (0..gates * h)
                            .map(|r| pre(w_hh, b_hh, &hs[b], h, r))
                            .collect();
                        let mut newh = vec![0.0; h];
                        for j in 0..h {
                            if lstm {
                                let gi = sig(xg[j] + hg[j]);
                                let gf = sig(xg[h + j] + hg[h + j]);
                                let gg = (xg[2 * h + j] + hg[2 * h + j]).tanh();
                                let go = sig(xg[3 * h + j] + hg[3 * h + j]);
                                cs[b][j] = gf * cs[b][j] + gi * gg;
                                newh[j] = go * cs[b][j].tanh();
                            } else {
                                let r = sig(xg[j] + hg[j]);
                                let z = sig(xg[h + j] + hg[h + j]);
                                let nn = (xg[2 * h + j] + r * hg[2 * h + j]).tanh();
                                newh[j] = (1.0 - z) * nn + z * hs[b][j];
                            }
                        }
                        hs[b] = newh;
                    }
                    for hb in &hs {
                        out.extend_from_slice(hb);
                    }
                }
                seq = out;
                width = h;
                hn.extend(hs.concat());
                cn.extend(cs.concat());
            }
            (seq, hn, cn)
        };
        let values: BTreeMap<String, Vec<f64>> = module
            .named_parameters()
            .into_iter()
            .map(|(k, t)| (k, t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()))
            .collect();
        let (want, want_h, want_c) = reference(&values);
        // The layer's run, in its layout.
        let f32s = |v: &[f64], shape: &[usize]| {
            Tensor::from_slice(v, shape, CPU)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
        };
        let xt = {
            let t = f32s(&x, &[steps, n_eff, inp]);
            if unbatched {
                t.squeeze(1).unwrap()
            } else if batch_first {
                t.transpose(0, 1).unwrap().contiguous().unwrap()
            } else {
                t
            }
        };
        let state = |v: &[f64]| {
            let t = f32s(v, &[layers, n_eff, h]);
            if unbatched { t.squeeze(1).unwrap() } else { t }
        };
        let (h0t, c0t) = (state(&h0), state(&c0));
        let out: RnnOutput = match &net {
            Net::L(l) => l.run(&xt, Some(&h0t), Some(&c0t)).unwrap(),
            Net::G(g) => g.run(&xt, Some(&h0t)).unwrap(),
        };
        let y = if unbatched || !batch_first {
            out.output.clone()
        } else {
            out.output.transpose(0, 1).unwrap()
        };
        let close32 = |t: &Tensor, b: &[f64], what: &str| {
            let a = t
                .contiguous()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            assert_eq!(a.len(), b.len(), "{what}");
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-5, "case {case} {what}: {a:?} vs {b:?}");
            }
        };
        close32(&y, &want, "output");
        close32(&out.h_n, &want_h, "h_n");
        match &out.c_n {
            Some(c) => close32(c, &want_c, "c_n"),
            None => assert!(!lstm),
        }
        // The gradient of sum(output) + sum(h_n) against central differences of the loops,
        // for one element of every parameter.
        out.output
            .sum()
            .unwrap()
            .add(&out.h_n.sum().unwrap())
            .unwrap()
            .backward()
            .unwrap();
        for (name, t) in module.named_parameters() {
            let grad = t
                .grad()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let i = rng.random_range(0..t.numel());
            let eps = 1e-6;
            let mut shifted = values.clone();
            shifted.get_mut(&name).unwrap()[i] += eps;
            let (up_y, up_h, _) = reference(&shifted);
            shifted.get_mut(&name).unwrap()[i] -= 2.0 * eps;
            let (dn_y, dn_h, _) = reference(&shifted);
            let f = |y: &[f64], hh: &[f64]| y.iter().sum::<f64>() + hh.iter().sum::<f64>();
            let numeric = (f(&up_y, &up_h) - f(&dn_y, &dn_h)) / (2.0 * eps);
            let tol = 1e-4 * (1.0 + numeric.abs());
            assert!(
                (grad[i] - numeric).abs() < tol,
                "case {case} d/d {name}[{i}]: {} vs {numeric}",
                grad[i]
            );
        }
    }
    // Refused: no hidden units or layers, a wrong input width, a wrong state shape, h_0
    // without c_0.
    let g = Generator::new(0);
    assert!(Lstm::new(3, 0, 1, true, false, &g, CPU).is_err());
    assert!(Gru::new(3, 4, 0, true, false, &g, CPU).is_err());
    let l = Lstm::new(3, 4, 1, true, false, &g, CPU).unwrap();
    let x = Tensor::zeros([5usize, 2, 3], DType::F32, CPU).unwrap();
    assert!(
        l.forward(&Tensor::zeros([5usize, 2, 4], DType::F32, CPU).unwrap())
            .is_err()
    );
    let bad = Tensor::zeros([1usize, 3, 4], DType::F32, CPU).unwrap();
    assert!(l.run(&x, Some(&bad), Some(&bad)).is_err());
    let good = Tensor::zeros([1usize, 2, 4], DType::F32, CPU).unwrap();
    assert!(l.run(&x, Some(&good), None).is_err());
    assert_eq!(
        l.run(&x, Some(&good), Some(&good)).unwrap().output.shape(),
        [5, 2, 4]
    );
}

#[test]
fn modules_name_their_parameters_as_pytorch() {
    let g = Generator::new(0);
    let mut model = Sequential::new()
        .add(Linear::new(4, 8, true, &g, CPU).unwrap())
        .add(Relu)
        .add(LayerNorm::new(&[8], 1e-5, true, CPU).unwrap())
        .add(Linear::new(8, 2, false, &g, CPU).unwrap());
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["0.weight", "0.bias", "2.weight", "2.bias", "3.weight"]
    );
    for p in model.parameters() {
        assert!(p.requires_grad() && p.is_leaf());
    }
    // PyTorch's Linear initialisation: uniform in ±1/√in.
    let w = vec32(&model.named_parameters()[0].1);
    assert!(w.iter().all(|v| v.abs() <= 0.5) && w.iter().any(|v| v.abs() > 0.3));
    let x = g.randn([3, 4], DType::F32, CPU).unwrap();
    let y = model.forward(&x).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    model.eval();
    model.train();
    // Round trip through a safetensors file into a fresh model.
    let dir = std::env::temp_dir().join(format!("genesis-nn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    model.save_safetensors(&path).unwrap();
    let h = Generator::new(1);
    let other = Sequential::new()
        .add(Linear::new(4, 8, true, &h, CPU).unwrap())
        .add(Relu)
        .add(LayerNorm::new(&[8], 1e-5, true, CPU).unwrap())
        .add(Linear::new(8, 2, false, &h, CPU).unwrap());
    assert_ne!(vec32(&other.forward(&x).unwrap()), vec32(&y));
    other.load_safetensors(&path).unwrap();
    assert_eq!(vec32(&other.forward(&x).unwrap()), vec32(&y));
    std::fs::remove_dir_all(&dir).unwrap();
    // Strict loading names what is wrong.
    let mut state: BTreeMap<String, Tensor> = model.state_dict();
    state.insert("extra".into(), Tensor::zeros([1], DType::F32, CPU).unwrap());
    assert!(matches!(
        other.load_state_dict(&state, true),
        Err(Error::InvalidArgument { .. })
    ));
    other.load_state_dict(&state, false).unwrap();
    state.remove("0.bias");
    assert!(other.load_state_dict(&state, false).is_err());
    let mut wrong = model.state_dict();
    wrong.insert(
        "0.bias".into(),
        Tensor::zeros([7], DType::F32, CPU).unwrap(),
    );
    assert!(other.load_state_dict(&wrong, true).is_err());
}

#[test]
fn norms_and_embeddings_compute_pytorchs_values() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 4.0, -1.0, 0.0, 3.0], [2, 3], CPU).unwrap();
    let ln = LayerNorm::new(&[3], 1e-5, true, CPU).unwrap();
    let y = vec32(&ln.forward(&x).unwrap());
    let mut want = Vec::new();
    for row in [[1.0f64, 2.0, 4.0], [-1.0, 0.0, 3.0]] {
        let m = row.iter().sum::<f64>() / 3.0;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / 3.0;
        want.extend(row.iter().map(|a| (a - m) / (v + 1e-5).sqrt()));
    }
    close(&y, &want, 1e-5, "layer_norm");
    let rms = RMSNorm::new(&[3], 1e-6, CPU).unwrap();
    let y = vec32(&rms.forward(&x).unwrap());
    let mut want = Vec::new();
    for row in [[1.0f64, 2.0, 4.0], [-1.0, 0.0, 3.0]] {
        let ms = row.iter().map(|a| a * a).sum::<f64>() / 3.0;
        want.extend(row.iter().map(|a| a / (ms + 1e-6).sqrt()));
    }
    close(&y, &want, 1e-5, "rms_norm");
    assert!(
        ln.forward(&Tensor::zeros([2, 4], DType::F32, CPU).unwrap())
            .is_err()
    );
    // An embedding looks rows up and sends gradients back to them (repeats add up).
    let g = Generator::new(3);
    let emb = Embedding::new(5, 2, &g, CPU).unwrap();
    let ids = Tensor::from_slice(&[4i64, 1, 4], [3], CPU).unwrap();
    let out = emb.forward(&ids).unwrap();
    assert_eq!(out.shape(), &[3, 2]);
    out.sum().unwrap().backward().unwrap();
    let gw = vec32(&emb.weight.grad().unwrap());
    assert_eq!(gw, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0]);
}

#[test]
fn losses_compute_pytorchs_values() {
    let logits_v = [0.5f64, -1.0, 2.0, 0.0, 0.3, -0.2];
    let logits = Tensor::from_slice(&logits_v.map(|v| v as f32), [2, 3], CPU).unwrap();
    let logp = |r: usize, c: usize| {
        let row = &logits_v[r * 3..r * 3 + 3];
        let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
        row[c] - lse
    };
    let target = Tensor::from_slice(&[2i64, 0], [2], CPU).unwrap();
    let ce = loss::cross_entropy(&logits, &target)
        .unwrap()
        .item::<f32>()
        .unwrap();
    close(
        &[ce],
        &[-(logp(0, 2) + logp(1, 0)) / 2.0],
        1e-6,
        "cross_entropy",
    );
    // Ignored targets count for nothing, also in the mean's denominator.
    let with_ignored = Tensor::from_slice(&[2i64, -100], [2], CPU).unwrap();
    let opts = CrossEntropy {
        ignore_index: Some(-100),
        ..Default::default()
    };
    let ce = loss::cross_entropy_with(&logits, Target::Indices(&with_ignored), opts)
        .unwrap()
        .item::<f32>()
        .unwrap();
    close(&[ce], &[-logp(0, 2)], 1e-6, "ignore_index");
    // Label smoothing: (1 - ε) nll + ε mean(-logp).
    let eps = 0.1;
    let opts = CrossEntropy {
        label_smoothing: eps,
        reduction: Reduction::None,
        ..Default::default()
    };
    let per = vec32(&loss::cross_entropy_with(&logits, Target::Indices(&target), opts).unwrap());
    let want: Vec<f64> = [(0, 2), (1, 0)]
        .iter()
        .map(|&(r, c)| {
            let smooth = -(0..3).map(|k| logp(r, k)).sum::<f64>() / 3.0;
            (1.0 - eps) * -logp(r, c) + eps * smooth
        })
        .collect();
    close(&per, &want, 1e-6, "label_smoothing");
    // Probabilities.
    let probs = Tensor::from_slice(&[0.2f32, 0.3, 0.5, 1.0, 0.0, 0.0], [2, 3], CPU).unwrap();
    let ce = loss::cross_entropy_with(
        &logits,
        Target::Probabilities(&probs),
        CrossEntropy::default(),
    )
    .unwrap()
    .item::<f32>()
    .unwrap();
    let want = -(0.2 * logp(0, 0) + 0.3 * logp(0, 1) + 0.5 * logp(0, 2) + logp(1, 0)) / 2.0;
    close(&[ce], &[want], 1e-6, "probabilities");
    // nll_loss, mse_loss, binary cross entropy with logits.
    let lp = logits.log_softmax(1).unwrap();
    let nll = loss::nll_loss(&lp, &target, None, Reduction::Sum)
        .unwrap()
        .item::<f32>()
        .unwrap();
    close(&[nll], &[-(logp(0, 2) + logp(1, 0))], 1e-6, "nll_loss");
    let t = Tensor::from_slice(&[1.0f32, 0.0, 0.5, 0.25, 1.0, 0.0], [2, 3], CPU).unwrap();
    let mse = loss::mse_loss(&logits, &t, Reduction::Mean)
        .unwrap()
        .item::<f32>()
        .unwrap();
    let tv = [1.0f64, 0.0, 0.5, 0.25, 1.0, 0.0];
    let want = logits_v
        .iter()
        .zip(&tv)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / 6.0;
    close(&[mse], &[want], 1e-6, "mse_loss");
    let bce = loss::binary_cross_entropy_with_logits(&logits, &t, Reduction::Mean)
        .unwrap()
        .item::<f32>()
        .unwrap();
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let want = logits_v
        .iter()
        .zip(&tv)
        .map(|(&x, &y)| -(y * sig(x).ln() + (1.0 - y) * (1.0 - sig(x)).ln()))
        .sum::<f64>()
        / 6.0;
    close(&[bce], &[want], 1e-5, "bce_with_logits");
    // Bad arguments.
    let bad = CrossEntropy {
        label_smoothing: 1.5,
        ..Default::default()
    };
    assert!(loss::cross_entropy_with(&logits, Target::Indices(&target), bad).is_err());
    let wrong = Tensor::from_slice(&[1i64, 2, 0], [3], CPU).unwrap();
    assert!(loss::cross_entropy(&logits, &wrong).is_err());
    let floats = Tensor::from_slice(&[1.0f32, 2.0], [2], CPU).unwrap();
    assert!(loss::cross_entropy(&logits, &floats).is_err());
}

/// PyTorch's SGD and Adam updates on the host, in f64, for parameters whose gradient is
/// `grad(p) = 2 p + 1` (the gradient of `sum(p² + p)`).
/// L1, smooth L1, Huber and binary cross entropy against PyTorch's formulas in float64 on
/// generated values (ties at `beta` and `delta`, probabilities 0 and 1 among them): the
/// losses under each reduction and the gradients of both operands.
#[test]
fn regression_and_probability_losses_as_pytorchs() {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let mut rng = SmallRng::seed_from_u64(8);
    let f64s = |v: &Tensor| v.to_vec::<f64>().unwrap();
    let near = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    };
    for case in 0..60 {
        let n = rng.random_range(1..12);
        let (beta, delta) = (rng.random_range(0.0..2.0), rng.random_range(0.1..2.0));
        let t: Vec<f64> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        // Some differences exactly at beta or delta, or zero.
        let x: Vec<f64> = t
            .iter()
            .map(|&v| match rng.random_range(0..5) {
                0 => v + beta,
                1 => v - delta,
                2 => v,
                _ => v + rng.random_range(-3.0..3.0),
            })
            .collect();
        // Per element: (loss, d loss / d x).
        type Rule = Box<dyn Fn(f64) -> (f64, f64)>;
        let rules: [(&str, Rule); 3] = [
            (
                "l1",
                Box::new(|d: f64| (d.abs(), d.signum() * (d != 0.0) as u8 as f64)),
            ),
            (
                "smooth_l1",
                Box::new(move |d: f64| {
                    if d.abs() < beta {
                        (0.5 * d * d / beta, d / beta)
                    } else {
                        (d.abs() - 0.5 * beta, d.signum())
                    }
                }),
            ),
            (
                "huber",
                Box::new(move |d: f64| {
                    if d.abs() < delta {
                        (0.5 * d * d, d)
                    } else {
                        (delta * (d.abs() - 0.5 * delta), delta * d.signum())
                    }
                }),
            ),
        ];
        for (name, rule) in rules.iter() {
            for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
                let xt = Tensor::from_slice(&x, [n], CPU)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap();
                let tt = Tensor::from_slice(&t, [n], CPU)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap();
                let l = match *name {
                    "l1" => loss::l1_loss(&xt, &tt, reduction),
                    "smooth_l1" => loss::smooth_l1_loss(&xt, &tt, reduction, beta),
                    _ => loss::huber_loss(&xt, &tt, reduction, delta),
                }
                .unwrap();
                let per: Vec<(f64, f64)> = x.iter().zip(&t).map(|(a, b)| rule(a - b)).collect();
                let scale = if reduction == Reduction::Mean {
                    1.0 / n as f64
                } else {
                    1.0
                };
                let what = format!("case {case} {name} {reduction:?}");
                match reduction {
                    Reduction::None => near(
                        &f64s(&l),
                        &per.iter().map(|p| p.0).collect::<Vec<_>>(),
                        &what,
                    ),
                    _ => near(
                        &[l.item::<f64>().unwrap()],
                        &[per.iter().map(|p| p.0).sum::<f64>() * scale],
                        &what,
                    ),
                }
                l.sum().unwrap().backward().unwrap();
                let gx: Vec<f64> = per.iter().map(|p| p.1 * scale).collect();
                near(
                    &f64s(&xt.grad().unwrap()),
                    &gx,
                    &format!("{what} input grad"),
                );
                let gt: Vec<f64> = gx.iter().map(|g| -g).collect();
                near(
                    &f64s(&tt.grad().unwrap()),
                    &gt,
                    &format!("{what} target grad"),
                );
            }
        }
        // Binary cross entropy: probabilities with 0 and 1 among them, a weight.
        let p: Vec<f64> = (0..n)
            .map(|_| match rng.random_range(0..6) {
                0 => 0.0,
                1 => 1.0,
                _ => rng.random_range(0.0..1.0),
            })
            .collect();
        let y: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..1.0)).collect();
        let w: Vec<f64> = (0..n).map(|_| rng.random_range(0.5..2.0)).collect();
        let pt = Tensor::from_slice(&p, [n], CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let yt = Tensor::from_slice(&y, [n], CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let wt = Tensor::from_slice(&w, [n], CPU).unwrap();
        let l = loss::binary_cross_entropy(&pt, &yt, Some(&wt), Reduction::None).unwrap();
        let logs = |v: f64| (v.ln().max(-100.0), (1.0 - v).ln().max(-100.0));
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let (lp, lq) = logs(p[i]);
                -w[i] * (y[i] * lp + (1.0 - y[i]) * lq)
            })
            .collect();
        near(&f64s(&l), &want, &format!("case {case} bce"));
        l.sum().unwrap().backward().unwrap();
        let gp: Vec<f64> = (0..n)
            .map(|i| w[i] * (p[i] - y[i]) / (p[i] * (1.0 - p[i])).max(1e-12))
            .collect();
        near(
            &f64s(&pt.grad().unwrap()),
            &gp,
            &format!("case {case} bce input grad"),
        );
        let gy: Vec<f64> = (0..n)
            .map(|i| {
                let (lp, lq) = logs(p[i]);
                w[i] * (lq - lp)
            })
            .collect();
        near(
            &f64s(&yt.grad().unwrap()),
            &gy,
            &format!("case {case} bce target grad"),
        );
    }
    // Refused as PyTorch refuses.
    let a = Tensor::from_slice(&[0.5f32, 1.5], [2], CPU).unwrap();
    let b = Tensor::from_slice(&[0.0f32, 1.0], [2], CPU).unwrap();
    assert!(loss::binary_cross_entropy(&a, &b, None, Reduction::Mean).is_err());
    let nan = Tensor::from_slice(&[f32::NAN, 0.5], [2], CPU).unwrap();
    assert!(loss::binary_cross_entropy(&nan, &b, None, Reduction::Mean).is_err());
    assert!(
        loss::binary_cross_entropy(&b, &b.narrow(0, 0, 1).unwrap(), None, Reduction::Mean).is_err()
    );
    assert!(loss::smooth_l1_loss(&a, &b, Reduction::Mean, -1.0).is_err());
    assert!(loss::huber_loss(&a, &b, Reduction::Mean, 0.0).is_err());
    assert!(loss::huber_loss(&a, &b, Reduction::Mean, f64::NAN).is_err());
    // Empty inputs: the mean of nothing is NaN, as PyTorch's.
    let e = Tensor::zeros([0usize], DType::F32, CPU).unwrap();
    assert!(
        loss::binary_cross_entropy(&e, &e, None, Reduction::Mean)
            .unwrap()
            .item::<f32>()
            .unwrap()
            .is_nan()
    );
}

/// A float64 leaf that requires grad, holding `values`.
fn leaf(values: &[f64]) -> Tensor {
    Tensor::from_slice(values, [values.len()], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Steps `opt` once per entry of `grads` with `p`'s gradient set to it (none for `None`),
/// then checks `p` against `want` within 1e-12.
fn step_through(
    opt: &mut dyn Optimizer,
    p: &Tensor,
    grads: &[Option<Vec<f64>>],
    want: &[f64],
    what: &str,
) {
    for g in grads {
        p.set_grad(
            g.as_ref()
                .map(|g| Tensor::from_slice(g, [g.len()], CPU).unwrap()),
        )
        .unwrap();
        opt.step().unwrap();
    }
    let got = p.to_vec::<f64>().unwrap();
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-12, "{what}: {got:?} vs {want:?}");
    }
}

/// RMSprop (plain, centred, with momentum and weight decay) and Adagrad (with learning-rate
/// decay and a starting accumulator) against their PyTorch update rules in float64 over
/// several steps of generated gradients, a step without a gradient among them; and their
/// refusals.
#[test]
fn rmsprop_and_adagrad_follow_pytorchs_updates() {
    use genesis_nn::optim::{Adagrad, RmsProp};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let mut rng = SmallRng::seed_from_u64(3);
    let n = 7;
    for case in 0..12 {
        let p0: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let grads: Vec<Option<Vec<f64>>> = (0..6)
            .map(|s| (s != 3).then(|| (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()))
            .collect();
        let (centered, momentum, wd) = (
            case % 2 == 1,
            [0.0, 0.9][case / 2 % 2],
            [0.0, 0.1][case / 4 % 2],
        );
        // RMSprop by the formulas.
        let (lr, alpha, eps) = (0.01, 0.9, 1e-8);
        let mut want = p0.clone();
        let (mut v, mut ga, mut b) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for g in grads.iter().flatten() {
            for i in 0..n {
                let gi = g[i] + wd * want[i];
                v[i] = alpha * v[i] + (1.0 - alpha) * gi * gi;
                let avg = if centered {
                    ga[i] = alpha * ga[i] + (1.0 - alpha) * gi;
                    (v[i] - ga[i] * ga[i]).sqrt() + eps
                } else {
                    v[i].sqrt() + eps
                };
                if momentum > 0.0 {
                    b[i] = momentum * b[i] + gi / avg;
                    want[i] -= lr * b[i];
                } else {
                    want[i] -= lr * gi / avg;
                }
            }
        }
        let p = leaf(&p0);
        let mut opt = RmsProp::new(vec![p.clone()], lr);
        (opt.alpha, opt.centered, opt.momentum, opt.weight_decay) = (alpha, centered, momentum, wd);
        step_through(&mut opt, &p, &grads, &want, &format!("rmsprop case {case}"));
        // Adagrad by the formulas.
        let (lr, lr_decay, init) = (0.1, [0.0, 0.05][case % 2], [0.0, 0.3][case / 2 % 2]);
        let mut want = p0.clone();
        let mut sum = vec![init; n];
        let mut t = 0;
        for g in grads.iter().flatten() {
            t += 1;
            let clr = lr / (1.0 + (t - 1) as f64 * lr_decay);
            for i in 0..n {
                let gi = g[i] + wd * want[i];
                sum[i] += gi * gi;
                want[i] -= clr * gi / (sum[i].sqrt() + 1e-10);
            }
        }
        let p = leaf(&p0);
        let mut opt = Adagrad::new(vec![p.clone()], lr);
        (
            opt.lr_decay,
            opt.initial_accumulator_value,
            opt.weight_decay,
        ) = (lr_decay, init, wd);
        step_through(&mut opt, &p, &grads, &want, &format!("adagrad case {case}"));
    }
    let p = Tensor::zeros([2usize], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut r = RmsProp::new(vec![p.clone()], -1.0);
    assert!(r.step().is_err());
    r.lr = 0.1;
    r.alpha = -0.5;
    assert!(r.step().is_err());
    let mut a = Adagrad::new(vec![p], 0.1);
    a.initial_accumulator_value = -1.0;
    assert!(a.step().is_err());
    a.initial_accumulator_value = f64::NAN;
    assert!(a.step().is_err());
    // A starting value a parameter's dtype cannot hold (found by the fuzzer): refused before
    // any parameter moves.
    let p64 = Tensor::from_slice(&[1.0f64, 2.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let p32 = Tensor::from_slice(&[1.0f32], [1], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    p64.set_grad(Some(p64.ones_like().unwrap())).unwrap();
    p32.set_grad(Some(p32.ones_like().unwrap())).unwrap();
    let mut a = Adagrad::new(vec![p64.clone(), p32.clone()], 0.1);
    a.initial_accumulator_value = 1e308;
    assert!(a.step().is_err());
    assert_eq!(p64.to_vec::<f64>().unwrap(), [1.0, 2.0]);
    assert_eq!(p32.to_vec::<f32>().unwrap(), [1.0]);
}

#[test]
fn optimisers_follow_pytorchs_updates() {
    let start = [0.5f64, -1.5, 2.0];
    let make = || {
        Tensor::from_slice(&start.map(|v| v as f32), [3], CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    };
    let run = |opt: &mut dyn Optimizer, p: &Tensor, steps: usize| {
        for _ in 0..steps {
            opt.zero_grad();
            p.square()
                .unwrap()
                .add(p)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            opt.step().unwrap();
        }
        vec32(p)
    };
    // SGD with momentum, dampening 0, Nesterov and weight decay.
    let p = make();
    let mut sgd = Sgd::new(vec![p.clone()], 0.1);
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    sgd.weight_decay = 0.01;
    let got = run(&mut sgd, &p, 3);
    let want: Vec<f64> = start
        .iter()
        .map(|&x0| {
            let (mut x, mut b) = (x0, None::<f64>);
            for _ in 0..3 {
                let g = 2.0 * x + 1.0 + 0.01 * x;
                let nb = match b {
                    None => g,
                    Some(b) => 0.9 * b + g,
                };
                b = Some(nb);
                x -= 0.1 * (g + 0.9 * nb);
            }
            x
        })
        .collect();
    close(&got, &want, 1e-5, "sgd");
    // Adam and AdamW.
    for decoupled in [false, true] {
        let p = make();
        let mut adam = if decoupled {
            Adam::adamw(vec![p.clone()], 0.05)
        } else {
            let mut a = Adam::new(vec![p.clone()], 0.05);
            a.weight_decay = 0.01;
            a
        };
        let got = run(&mut adam, &p, 5);
        let want: Vec<f64> = start
            .iter()
            .map(|&x0| {
                let (mut x, mut m, mut v) = (x0, 0.0f64, 0.0f64);
                for t in 1..=5 {
                    let mut g = 2.0 * x + 1.0;
                    if decoupled {
                        x *= 1.0 - 0.05 * 0.01;
                    } else {
                        g += 0.01 * x;
                    }
                    m += 0.1 * (g - m);
                    v = 0.999 * v + 0.001 * g * g;
                    let bc1 = 1.0 - 0.9f64.powi(t);
                    let bc2 = 1.0 - 0.999f64.powi(t);
                    x -= 0.05 / bc1 * m / (v.sqrt() / bc2.sqrt() + 1e-8);
                }
                x
            })
            .collect();
        close(&got, &want, 1e-5, if decoupled { "adamw" } else { "adam" });
    }
}

#[test]
fn clipping_schedules_dropout_and_initialisers() {
    let p = Tensor::from_slice(&[3.0f32, 4.0], [2], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    p.mul(&p)
        .unwrap()
        .sum()
        .unwrap()
        .mul(0.5)
        .unwrap()
        .backward()
        .unwrap(); // grad = p
    let norm = clip_grad_norm_(std::slice::from_ref(&p), 1.0)
        .unwrap()
        .unwrap();
    close(&[norm.item::<f32>().unwrap()], &[5.0], 1e-6, "norm");
    close(&vec32(&p.grad().unwrap()), &[0.6, 0.8], 1e-5, "clipped");
    let step = StepLr {
        step_size: 10,
        gamma: 0.5,
    };
    assert_eq!(
        (step.factor(9), step.factor(10), step.factor(25)),
        (1.0, 0.5, 0.25)
    );
    let cos = CosineWithWarmup {
        warmup: 10,
        total: 110,
        min_factor: 0.1,
    };
    assert_eq!(cos.factor(0), 0.1);
    assert_eq!(cos.factor(9), 1.0);
    assert!((cos.factor(60) - 0.55).abs() < 1e-12);
    assert_eq!(cos.factor(500), 0.1);
    // Dropout: seeded, scaled by 1 / (1 - p) in training, the identity in evaluation.
    let x = Tensor::ones([1000], DType::F32, CPU).unwrap();
    let mut d = Dropout::new(0.25, 7).unwrap();
    let y = vec32(&d.forward(&x).unwrap());
    let kept = y.iter().filter(|&&v| v != 0.0).count();
    assert!((700..800).contains(&kept), "{kept} kept");
    assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
    assert_eq!(
        y,
        vec32(&Dropout::new(0.25, 7).unwrap().forward(&x).unwrap())
    );
    d.eval();
    assert_eq!(vec32(&d.forward(&x).unwrap()), vec![1.0; 1000]);
    assert!(Dropout::new(1.5, 0).is_err());
    // Initialisers: ranges and spreads.
    let g = Generator::new(11);
    let w = Tensor::zeros([200, 100], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    init::xavier_uniform_(&w, 1.0, &g).unwrap();
    let bound = (6.0f64 / 300.0).sqrt();
    assert!(vec32(&w).iter().all(|v| (v.abs() as f64) <= bound));
    init::kaiming_normal_(&w, 0.0, &g).unwrap();
    let std = (vec32(&w).iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 20000.0).sqrt();
    assert!(
        (std - (2.0f64 / 100.0).sqrt()).abs() < 0.01,
        "kaiming std {std}"
    );
    init::trunc_normal_(&w, 0.0, 1.0, -2.0, 2.0, &g).unwrap();
    assert!(vec32(&w).iter().all(|v| v.abs() <= 2.0));
    assert!(init::trunc_normal_(&w, 0.0, 1.0, 2.0, -2.0, &g).is_err());
    assert!(
        init::kaiming_uniform_(&Tensor::zeros([3], DType::F32, CPU).unwrap(), 0.0, &g).is_err()
    );
    // GELU module matches the facade op.
    let x = g.randn([5], DType::F32, CPU).unwrap();
    assert_eq!(
        vec32(&Gelu { tanh: true }.forward(&x).unwrap()),
        vec32(&x.gelu_tanh().unwrap())
    );
    assert!(no_grad(|| w.add_(1.0)).is_ok());
}

/// The same MLP from the same initial parameters, trained on the same batches, gives
/// PyTorch's losses (`tests/data/torch_mlp_losses.json`, written by `tests/torch_mlp.py` on
/// the CPU) within 1e-5 relative for 100 Adam steps.
#[test]
fn mlp_training_matches_pytorchs_losses() {
    let want = parse_losses(include_str!("data/torch_mlp_losses.json"));
    assert_eq!(want.len(), 100);
    let got = genesis_nn::train::comparison_losses(0, 100, CPU).unwrap();
    let mut worst = 0.0f64;
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        let rel = ((*g as f64) - w).abs() / w.abs();
        worst = worst.max(rel);
        assert!(
            rel <= 1e-5,
            "step {step}: ours {g}, PyTorch's {w} (relative {rel:e})"
        );
    }
    eprintln!("largest relative difference from PyTorch over 100 steps: {worst:e}");
}

/// The `"losses"` array of the fixture.
fn parse_losses(json: &str) -> Vec<f64> {
    let start = json.find("\"losses\"").expect("a losses field") + "\"losses\"".len();
    let open = start + json[start..].find('[').expect("an array");
    let close = open + json[open..].find(']').expect("its end");
    json[open + 1..close]
        .split(',')
        .map(|v| v.trim().parse::<f64>().expect("a number"))
        .collect()
}

/// A state_dict saved by PyTorch (`safetensors.torch.save_file`, `tests/torch_state_dict.py`)
/// loads into the same Genesis model, which then gives PyTorch's output.
#[test]
fn a_pytorch_state_dict_loads_into_the_same_model() {
    let g = Generator::new(0);
    let model = Sequential::new()
        .add(Linear::new(4, 3, true, &g, CPU).unwrap())
        .add(Gelu::default())
        .add(LayerNorm::new(&[3], 1e-5, true, CPU).unwrap())
        .add(Linear::new(3, 2, false, &g, CPU).unwrap());
    let state = embedded(include_bytes!("data/torch_state_dict.safetensors"));
    model.load_state_dict(&state, true).unwrap();
    let io = embedded(include_bytes!("data/torch_state_dict_io.safetensors"));
    let got = vec32(&model.forward(&io["input"]).unwrap());
    let want: Vec<f64> = vec32(&io["output"]).iter().map(|&v| v as f64).collect();
    close(
        &got,
        &want,
        1e-6,
        "forward after loading PyTorch's state_dict",
    );
}

/// A GPT-2-style block (pre-LayerNorm causal self-attention and a GELU-tanh MLP with
/// residuals) built from Genesis ops gives PyTorch's loss and gradients for every parameter
/// and the input (`tests/data/torch_block.safetensors`, from `tests/torch_block.py`).
#[test]
fn a_transformer_block_matches_pytorchs_gradients() {
    let data = embedded(include_bytes!("data/torch_block.safetensors"));
    let (b, t, c, h) = (2usize, 5usize, 8usize, 2usize);
    let d = c / h;
    let g = Generator::new(0);
    let lin = |i: usize, o: usize| Linear::new(i, o, true, &g, CPU).unwrap();
    let ln_1 = LayerNorm::new(&[c], 1e-5, true, CPU).unwrap();
    let c_attn = lin(c, 3 * c);
    let c_proj = lin(c, c);
    let ln_2 = LayerNorm::new(&[c], 1e-5, true, CPU).unwrap();
    let c_fc = lin(c, 4 * c);
    let mlp_proj = lin(4 * c, c);
    let named: Vec<(&str, &dyn Module)> = vec![
        ("ln_1", &ln_1),
        ("c_attn", &c_attn),
        ("c_proj", &c_proj),
        ("ln_2", &ln_2),
        ("c_fc", &c_fc),
        ("mlp_proj", &mlp_proj),
    ];
    for (prefix, m) in &named {
        let state: BTreeMap<String, Tensor> = m
            .named_parameters()
            .into_iter()
            .map(|(n, _)| (n.clone(), data[&format!("{prefix}.{n}")].clone()))
            .collect();
        m.load_state_dict(&state, true).unwrap();
    }
    let x = data["x"].clone().requires_grad_(true).unwrap();
    let heads = |z: &Tensor| -> Tensor {
        z.reshape([b, t, h, d].map(|n| n as isize))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
    };
    let hidden = ln_1.forward(&x).unwrap();
    let qkv = c_attn.forward(&hidden).unwrap().split(c, 2).unwrap();
    let (q, k, v) = (heads(&qkv[0]), heads(&qkv[1]), heads(&qkv[2]));
    let att = q
        .matmul(&k.transpose(-2, -1).unwrap())
        .unwrap()
        .mul(1.0 / (d as f64).sqrt())
        .unwrap();
    let causal = Tensor::ones([t, t], DType::Bool, CPU)
        .unwrap()
        .triu(1)
        .unwrap();
    let att = att
        .masked_fill(&causal, f64::NEG_INFINITY)
        .unwrap()
        .softmax(-1)
        .unwrap();
    let y = att
        .matmul(&v)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape([b, t, c].map(|n| n as isize))
        .unwrap();
    let x1 = x.add(&c_proj.forward(&y).unwrap()).unwrap();
    let m = mlp_proj
        .forward(
            &c_fc
                .forward(&ln_2.forward(&x1).unwrap())
                .unwrap()
                .gelu_tanh()
                .unwrap(),
        )
        .unwrap();
    let out = x1.add(&m).unwrap();
    let loss = out.mul(&data["w"]).unwrap().sum().unwrap();
    let want_loss = vec32(&data["loss"])[0] as f64;
    close(&[loss.item::<f32>().unwrap()], &[want_loss], 1e-5, "loss");
    loss.backward().unwrap();
    let check = |name: &str, got: &Tensor| {
        let want: Vec<f64> = vec32(&data[&format!("grad.{name}")])
            .iter()
            .map(|&v| v as f64)
            .collect();
        close(&vec32(&got.contiguous().unwrap()), &want, 2e-5, name);
    };
    check("x", &x.grad().unwrap());
    for (prefix, m) in &named {
        for (n, p) in m.named_parameters() {
            check(&format!("{prefix}.{n}"), &p.grad().unwrap());
        }
    }
}

/// The tiny GPT-2 (nanoGPT's layout, AdamW, clipping) from the same initial parameters on the
/// same byte batches gives PyTorch's losses (`tests/data/torch_gpt2_losses.json`, written by
/// `tests/torch_gpt2.py` on the CPU) within 1e-4 relative for 50 steps.
#[test]
fn tiny_gpt2_training_matches_pytorchs_losses() {
    let want = parse_losses(include_str!("data/torch_gpt2_losses.json"));
    assert_eq!(want.len(), 50);
    let got = genesis_nn::train::gpt2_tiny_losses(50, CPU).unwrap();
    let mut worst = 0.0f64;
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        let rel = ((*g as f64) - w).abs() / w.abs();
        worst = worst.max(rel);
        assert!(
            rel <= 1e-4,
            "step {step}: ours {g}, PyTorch's {w} (relative {rel:e})"
        );
    }
    eprintln!("largest relative difference from PyTorch over 50 steps: {worst:e}");
    assert!(want[49] < want[0] - 1.0, "the loss falls");
}

/// GPT-2's parameters carry nanoGPT's names; its state_dict lists the tied head too, and a
/// state_dict whose head differs from the embedding is refused.
#[test]
fn gpt2_names_and_the_tied_head() {
    use genesis_nn::gpt2::{Gpt2, Gpt2Config};
    let cfg = genesis_nn::train::gpt2_tiny_config();
    let g = Generator::new(0);
    let model = Gpt2::new(cfg, &g, CPU).unwrap();
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names[0], "transformer.wte.weight");
    assert!(names.contains(&"transformer.h.1.attn.c_attn.weight".to_string()));
    assert!(names.contains(&"transformer.h.0.mlp.c_proj.bias".to_string()));
    assert_eq!(names.last().unwrap(), "transformer.ln_f.bias");
    assert_eq!(names.len(), 2 + 2 * 12 + 2);
    let state = model.state_dict();
    assert!(state.contains_key("lm_head.weight"));
    let other = Gpt2::new(cfg, &Generator::new(1), CPU).unwrap();
    other.load_state_dict(&state, true).unwrap();
    let idx = Tensor::from_slice(&[1i64, 2, 3, 4], [1, 4], CPU).unwrap();
    assert_eq!(
        vec32(&other.logits(&idx).unwrap()),
        vec32(&model.logits(&idx).unwrap())
    );
    let mut bad = state.clone();
    bad.insert(
        "lm_head.weight".into(),
        Tensor::zeros([256, 32], DType::F32, CPU).unwrap(),
    );
    assert!(other.load_state_dict(&bad, true).is_err());
    assert!(
        model
            .logits(&Tensor::zeros([1, 33], DType::I64, CPU).unwrap())
            .is_err()
    );
    let odd = Gpt2Config { n_head: 3, ..cfg };
    assert!(Gpt2::new(odd, &g, CPU).is_err());
}

/// A safetensors file embedded in the test binary (the fixtures travel with it), by name.
fn embedded(bytes: &[u8]) -> BTreeMap<String, Tensor> {
    genesis::deserialize_safetensors(bytes, CPU)
        .unwrap()
        .into_iter()
        .collect()
}

/// On a GPU, the MLP and the tiny GPT-2 follow the CPU's losses (float32 products summed in
/// another order: within 1e-4 relative).
#[test]
fn cuda_training_follows_the_cpu() {
    /// Gives the cached device memory back when the test ends (nothing held at exit).
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            #[cfg(feature = "cuda")]
            if genesis::cuda::is_available() {
                let _ = genesis::cuda::empty_cache();
            }
        }
    }
    let _release = Release;
    if !genesis::cuda::is_available() {
        eprintln!("cuda_training_follows_the_cpu: skipped: no CUDA device found");
        return;
    }
    let gpu = Device::Cuda(0);
    for (name, cpu, cuda) in [
        (
            "mlp",
            genesis_nn::train::comparison_losses(0, 100, CPU).unwrap(),
            genesis_nn::train::comparison_losses(0, 100, gpu).unwrap(),
        ),
        (
            "gpt2",
            genesis_nn::train::gpt2_tiny_losses(50, CPU).unwrap(),
            genesis_nn::train::gpt2_tiny_losses(50, gpu).unwrap(),
        ),
    ] {
        for (step, (a, b)) in cpu.iter().zip(&cuda).enumerate() {
            let rel = ((a - b) / a).abs();
            assert!(rel <= 1e-4, "{name} step {step}: cpu {a}, cuda {b}");
        }
    }
    let run = genesis_nn::train::train_digits(gpu, 20, 0).unwrap();
    assert!(
        run.test_accuracy >= 0.95,
        "cuda accuracy {}",
        run.test_accuracy
    );
}

/// Mixed precision: the tiny GPT-2 trained under `autocast(BF16)` (float32 master weights)
/// follows PyTorch's `torch.autocast(dtype=torch.bfloat16)` run on the CPU
/// (`tests/data/torch_gpt2_bf16_losses.json`) within 1e-3 relative for 50 steps, and the
/// float32 run within 1e-2.
#[test]
fn tiny_gpt2_under_bf16_autocast_follows_pytorchs() {
    let want = parse_losses(include_str!("data/torch_gpt2_bf16_losses.json"));
    let got = genesis_nn::train::gpt2_tiny_losses_with(50, CPU, Some(DType::BF16)).unwrap();
    let full = genesis_nn::train::gpt2_tiny_losses(50, CPU).unwrap();
    let mut worst = 0.0f64;
    for (step, ((g, w), f)) in got.iter().zip(&want).zip(&full).enumerate() {
        let rel = ((*g as f64) - w).abs() / w.abs();
        worst = worst.max(rel);
        assert!(rel <= 1e-3, "step {step}: ours {g}, PyTorch's {w}");
        assert!(
            ((g - f) / f).abs() <= 1e-2,
            "step {step}: bf16 {g}, f32 {f}"
        );
    }
    eprintln!("bf16 autocast: largest relative difference from PyTorch over 50 steps: {worst:e}");
}

/// Recomputing the blocks' activations in the backward gives the same gradients as keeping
/// them.
#[test]
fn gpt2_recomputation_gives_the_same_gradients() {
    use genesis_nn::gpt2::Gpt2;
    let cfg = genesis_nn::train::gpt2_tiny_config();
    let (x, y) =
        genesis_nn::train::gpt2_tiny_batch(genesis_nn::train::gpt2_tiny_text(), 3, CPU).unwrap();
    let grads = |recompute: bool| -> Vec<Vec<f32>> {
        let mut model = Gpt2::new(cfg, &Generator::new(0), CPU).unwrap();
        model.recompute = recompute;
        model.loss(&x, &y).unwrap().backward().unwrap();
        model
            .parameters()
            .iter()
            .map(|p| vec32(&p.grad().unwrap()))
            .collect()
    };
    let (kept, again) = (grads(false), grads(true));
    assert_eq!(kept.len(), again.len());
    for (a, b) in kept.iter().zip(&again) {
        assert_eq!(a, b);
    }
}
