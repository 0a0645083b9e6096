//! Data-parallel training: the bucket layout, the gradient views and the order hooks fire in,
//! and training a small GPT-2 data-parallel (plain and ZeRO-1) against one process with the
//! whole batch: on the host with ranks as threads ([`HostGroup`]), on one GPU through NCCL
//! (a world of one), and on every GPU with one process each (two or more GPUs; "skipped"
//! otherwise).

mod common;
use common::{gpus, gpus_lock, launch_ranks, nccl_world_of_one, skip};
use std::sync::Arc;
use std::time::Duration;

use genesis::{DType, Device, Generator, Tensor};
use genesis_dist::{
    BucketLayout, Collectives, DdpOptions, DistributedDataParallel, GroupEnv, HostGroup,
    ProcessGroup, ReduceOp, ZeroAdamW,
};
use genesis_nn::Linear;
use genesis_nn::Module;
use genesis_nn::gpt2::{Gpt2, Gpt2Config};
use genesis_nn::optim::{Adam, Optimizer, clip_grad_norm_};
use genesis_nn::train::{gpt2_tiny_text, window_batch};

const T: Duration = Duration::from_secs(120);

#[test]
fn buckets_take_parameters_from_the_last_and_close_at_the_cap() {
    // 4-byte elements, a cap of 200 bytes (50 elements).
    let l = BucketLayout::new(&[10, 20, 30, 40], 4, 200, 1, 1);
    let params: Vec<Vec<usize>> = l.buckets.iter().map(|b| b.params.clone()).collect();
    assert_eq!(params, [vec![3], vec![2, 1], vec![0]]);
    assert_eq!(l.offsets, [90, 70, 40, 0]);
    assert_eq!(l.bucket_of, [2, 1, 1, 0]);
    assert_eq!(
        l.buckets
            .iter()
            .map(|b| (b.offset, b.len))
            .collect::<Vec<_>>(),
        [(0, 40), (40, 50), (90, 10)]
    );
    assert_eq!(l.total, 100);
    // Padded to multiples of 4 (ZeRO-1 over 4 ranks): each rank's part of each bucket.
    let l = BucketLayout::new(&[10, 20, 30, 40], 4, 200, 1, 4);
    assert_eq!(l.offsets, [92, 70, 40, 0]);
    assert_eq!(
        l.buckets
            .iter()
            .map(|b| (b.offset, b.len))
            .collect::<Vec<_>>(),
        [(0, 40), (40, 52), (92, 12)]
    );
    assert_eq!(l.total, 104);
    assert_eq!(l.shard(1, 0, 4), (40, 13));
    assert_eq!(l.shard(1, 3, 4), (79, 13));
    // A parameter over the cap is a bucket of its own; a zero cap gives one bucket each.
    let l = BucketLayout::new(&[5, 100, 5], 4, 40, 1, 1);
    let params: Vec<Vec<usize>> = l.buckets.iter().map(|b| b.params.clone()).collect();
    assert_eq!(params, [vec![2], vec![1], vec![0]]);
    let l = BucketLayout::new(&[5, 6, 7], 4, 0, 1, 1);
    assert_eq!(l.buckets.len(), 3);
    // Everything in one bucket under a large cap.
    let l = BucketLayout::new(&[5, 6, 7], 4, 1 << 20, 1, 1);
    assert_eq!(l.buckets.len(), 1);
    assert_eq!(l.buckets[0].params, [2, 1, 0]);
    assert_eq!(l.offsets, [13, 7, 0]);
    // Aligned to 8 elements (the gaps count toward the cap), buckets padded to 3 parts of
    // multiples of 8.
    let l = BucketLayout::new(&[5, 6, 7], 4, 16 * 4, 8, 3);
    let params: Vec<Vec<usize>> = l.buckets.iter().map(|b| b.params.clone()).collect();
    assert_eq!(params, [vec![2, 1], vec![0]]);
    assert_eq!(l.offsets, [24, 8, 0]);
    assert_eq!(l.bucket_of, [1, 0, 0]);
    assert_eq!(
        l.buckets
            .iter()
            .map(|b| (b.offset, b.len))
            .collect::<Vec<_>>(),
        [(0, 24), (24, 24)]
    );
    assert_eq!(l.shard(1, 2, 3), (40, 8));
}

fn world_of_one() -> Arc<dyn Collectives> {
    Arc::new(HostGroup::new(1).remove(0))
}

#[test]
fn gradients_are_views_of_the_flat_buffer_and_hooks_fire_in_backward_order() {
    let g = Generator::new(1);
    let l1 = Linear::new(4, 8, true, &g, Device::Cpu).unwrap();
    let l2 = Linear::new(8, 8, true, &g, Device::Cpu).unwrap();
    let l3 = Linear::new(8, 2, true, &g, Device::Cpu).unwrap();
    let params: Vec<Tensor> = [&l1, &l2, &l3]
        .iter()
        .flat_map(|l| l.parameters())
        .collect();
    let opts = DdpOptions {
        bucket_cap_bytes: 48 * 4,
        ..DdpOptions::default()
    };
    let ddp = DistributedDataParallel::new(params.clone(), world_of_one(), opts).unwrap();
    assert!(ddp.layout().buckets.len() > 1);
    let flat = ddp.flat_grad().clone();
    let x = g.randn([3usize, 4], DType::F32, Device::Cpu).unwrap();
    for round in 0..2 {
        if round == 0 {
            ddp.zero_grad().unwrap();
        } else {
            // The optimiser's zero_grad drops the gradients: the hooks copy the new ones
            // into the views and make them the gradients again.
            for p in &params {
                p.zero_grad();
            }
        }
        let h = l1.forward(&x).unwrap().tanh().unwrap();
        let h = l2.forward(&h).unwrap().tanh().unwrap();
        l3.forward(&h)
            .unwrap()
            .square()
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        ddp.finish().unwrap();
        // Backward reaches the last layer first: (weight, bias) pairs from the last.
        let order = ddp.last_ready_order();
        let mut pairs: Vec<Vec<usize>> = order
            .chunks(2)
            .map(|c| {
                let mut c = c.to_vec();
                c.sort();
                c
            })
            .collect();
        assert_eq!(pairs.len(), 3);
        pairs.dedup();
        assert_eq!(pairs, [vec![4, 5], vec![2, 3], vec![0, 1]], "round {round}");
        for (i, p) in params.iter().enumerate() {
            let grad = p.grad().unwrap();
            assert!(grad.shares_storage(&flat), "round {round}, parameter {i}");
            assert_eq!(
                grad.data_ptr(),
                flat.data_ptr() + (ddp.layout().offsets[i] * 4) as u64
            );
        }
    }
    // The gradients equal those of the same backward without data parallelism.
    let want: Vec<Vec<f32>> = {
        let q: Vec<Tensor> = params
            .iter()
            .map(|p| {
                p.detach()
                    .deep_clone()
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap()
            })
            .collect();
        let lin = |x: &Tensor, w: &Tensor, b: &Tensor| x.linear(w, Some(b)).unwrap();
        let h = lin(&x, &q[0], &q[1]).tanh().unwrap();
        let h = lin(&h, &q[2], &q[3]).tanh().unwrap();
        lin(&h, &q[4], &q[5])
            .square()
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        q.iter()
            .map(|t| t.grad().unwrap().to_vec::<f32>().unwrap())
            .collect()
    };
    for (p, w) in params.iter().zip(&want) {
        assert_eq!(&p.grad().unwrap().to_vec::<f32>().unwrap(), w);
    }
    // A second backward before finish() is an error, not a silent double reduction.
    let h = l1.forward(&x).unwrap().sum().unwrap();
    h.backward().unwrap();
    assert!(l1.forward(&x).unwrap().sum().unwrap().backward().is_err());
    assert!(ddp.finish().is_err());
    // Inside no_sync, gradients accumulate without a round.
    ddp.zero_grad().unwrap();
    ddp.no_sync(|| {
        l1.forward(&x).unwrap().sum().unwrap().backward().unwrap();
        l1.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    });
    l1.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    ddp.finish().unwrap();
    let gb: Vec<f32> = params[1].grad().unwrap().to_vec().unwrap();
    assert!(
        gb.iter().all(|&v| v == 9.0),
        "three backwards of sum: {gb:?}"
    );
}

/// The small GPT-2 of the tests.
fn config() -> Gpt2Config {
    Gpt2Config::named("tiny").unwrap()
}

const B: usize = 2;
const SEQ: usize = 32;
const STEPS: usize = 4;
const LR: f64 = 6e-4;

/// How a run reduces and steps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Single,
    Ddp,
    Zero1,
}

/// Trains the small GPT-2 for [`STEPS`] steps with AdamW (GPT-2's hyper-parameters) and
/// clipping at 1 (`clip`): one process with the global batch of `world * B` windows
/// (`Single`), or rank `group.rank()` of `world` with its `B` of them. Returns each step's
/// loss (this rank's) and the parameters at the end.
fn train(
    mode: Mode,
    group: Option<Arc<dyn Collectives>>,
    world: usize,
    device: Device,
    clip: bool,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let model = Gpt2::new(config(), &Generator::new(0), device).unwrap();
    let text = gpt2_tiny_text();
    let opts = DdpOptions {
        bucket_cap_bytes: 40 << 10,
        shard: mode == Mode::Zero1,
        ..DdpOptions::default()
    };
    let ddp = group.map(|g| DistributedDataParallel::new(model.parameters(), g, opts).unwrap());
    // ZeRO-1's AdamW, or AdamW over the whole parameters.
    let (mut zero, mut adam) = match mode {
        Mode::Zero1 => {
            let mut o = ZeroAdamW::new(ddp.as_ref().unwrap(), LR).unwrap();
            o.betas = (0.9, 0.95);
            o.weight_decay = 0.1;
            (Some(o), None)
        }
        _ => {
            let mut o = Adam::adamw(model.parameters(), LR);
            o.betas = (0.9, 0.95);
            o.weight_decay = 0.1;
            (None, Some(o))
        }
    };
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let (x, y) = window_batch(text, step, world * B, SEQ, 7919, device).unwrap();
        let (x, y) = match &ddp {
            Some(d) => {
                let r = d.group().rank();
                (
                    x.narrow(0, r * B, B).unwrap(),
                    y.narrow(0, r * B, B).unwrap(),
                )
            }
            None => (x, y),
        };
        match (&ddp, &adam) {
            (Some(d), _) => d.zero_grad().unwrap(),
            (None, Some(o)) => o.zero_grad(),
            (None, None) => unreachable!(),
        }
        let loss = model.loss(&x, &y).unwrap();
        loss.backward().unwrap();
        if let Some(d) = &ddp {
            d.finish().unwrap();
        }
        if let Some(o) = &mut zero {
            if clip {
                o.clip_grad_norm_(1.0).unwrap();
            }
            o.step().unwrap();
        }
        if let Some(o) = &mut adam {
            if clip {
                clip_grad_norm_(o.params(), 1.0).unwrap();
            }
            o.step().unwrap();
        }
        losses.push(loss.item::<f32>().unwrap());
    }
    let params = model
        .parameters()
        .iter()
        .map(|p| p.to_vec::<f32>().unwrap())
        .collect();
    (losses, params)
}

/// Runs `world` ranks as threads of a [`HostGroup`], each training with its part of the
/// batch; the ranks' losses averaged.
fn train_threads(mode: Mode, world: usize, clip: bool) -> (Vec<f32>, Vec<Vec<Vec<f32>>>) {
    let groups = HostGroup::new(world);
    let runs: Vec<(Vec<f32>, Vec<Vec<f32>>)> = std::thread::scope(|s| {
        let hs: Vec<_> = groups
            .into_iter()
            .map(|g| {
                s.spawn(move || {
                    train(
                        mode,
                        Some(Arc::new(g) as Arc<dyn Collectives>),
                        world,
                        Device::Cpu,
                        clip,
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mean = (0..STEPS)
        .map(|s| runs.iter().map(|r| r.0[s]).sum::<f32>() / world as f32)
        .collect();
    (mean, runs.into_iter().map(|r| r.1).collect())
}

fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * w.abs(),
            "{what}, step {i}: {g} vs {w} (relative {})",
            (g - w).abs() / w.abs()
        );
    }
}

#[test]
fn a_world_of_one_trains_exactly_as_no_data_parallelism() {
    let (want, want_params) = train(Mode::Single, None, 1, Device::Cpu, true);
    let (got, got_params) = train(Mode::Ddp, Some(world_of_one()), 1, Device::Cpu, true);
    assert_eq!(got, want);
    assert_eq!(got_params, want_params);
    // ZeRO-1's AdamW over the parts of a world of one is the same fused update.
    let (want, want_params) = train(Mode::Single, None, 1, Device::Cpu, false);
    let (got, got_params) = train(Mode::Zero1, Some(world_of_one()), 1, Device::Cpu, false);
    assert_eq!(got, want);
    assert_eq!(got_params, want_params);
    // With its own clipping (the norm's squares summed per part): within rounding.
    let (want, _) = train(Mode::Single, None, 1, Device::Cpu, true);
    let (got, _) = train(Mode::Zero1, Some(world_of_one()), 1, Device::Cpu, true);
    assert_close("ZeRO-1 clipped, a world of one", &got, &want, 1e-6);
}

#[test]
fn ranks_with_parts_of_the_batch_train_as_one_process_with_all_of_it() {
    for world in [2, 3] {
        let (want, want_params) = train(Mode::Single, None, world, Device::Cpu, true);
        for mode in [Mode::Ddp, Mode::Zero1] {
            let (got, params) = train_threads(mode, world, true);
            eprintln!("{mode:?} on {world} ranks: {got:?}, one process: {want:?}");
            assert_close(&format!("{mode:?} on {world} ranks"), &got, &want, 1e-5);
            // Every rank holds the same parameters, near the single process's.
            for r in 1..world {
                assert_eq!(params[r], params[0], "{mode:?}: rank {r}'s parameters");
            }
            for (p, w) in params[0].iter().zip(&want_params) {
                for (a, b) in p.iter().zip(w) {
                    assert!((a - b).abs() <= 1e-4, "{mode:?}: {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn a_world_of_one_through_nccl_trains_exactly_as_no_data_parallelism() {
    let _gpus = gpus_lock();
    if let Some(why) = skip(1) {
        eprintln!("skipped: {why}");
        return;
    }
    let (_server, pg) = nccl_world_of_one(T);
    let pg: Arc<dyn Collectives> = Arc::new(pg);
    let dev = Device::Cuda(0);
    let (want, want_params) = train(Mode::Single, None, 1, dev, true);
    let (got, got_params) = train(Mode::Ddp, Some(pg.clone()), 1, dev, true);
    assert_eq!(got, want);
    assert_eq!(got_params, want_params);
    let (want, want_params) = train(Mode::Single, None, 1, dev, false);
    let (got, got_params) = train(Mode::Zero1, Some(pg), 1, dev, false);
    assert_eq!(got, want);
    assert_eq!(got_params, want_params);
    eprintln!("world of one through NCCL: DDP and ZeRO-1 train as one process, bit for bit");
}

/// One rank of [`one_process_per_gpu_trains_as_one_process`] (a no-op unless launched by
/// it): trains data-parallel (plain, then ZeRO-1), averages the ranks' losses (an
/// all-reduce), and compares them with one process training on the whole batch on this GPU.
#[test]
fn rank_of_a_launched_ddp_group() {
    if std::env::var_os("GENESIS_DIST_DDP_CHILD").is_none() {
        return;
    }
    let env = GroupEnv::from_env().unwrap();
    let pg = Arc::new(ProcessGroup::new(&env, T).unwrap());
    let world = env.world_size;
    let dev = Device::Cuda(env.local_rank);
    genesis::cuda::set_device(env.local_rank).unwrap();
    let (want, _) = train(Mode::Single, None, world, dev, true);
    for mode in [Mode::Ddp, Mode::Zero1] {
        let (got, _) = train(
            mode,
            Some(pg.clone() as Arc<dyn Collectives>),
            world,
            dev,
            true,
        );
        let t = Tensor::from_slice(&got, [got.len()], dev).unwrap();
        pg.all_reduce(&t, ReduceOp::Avg).unwrap().wait().unwrap();
        let mean: Vec<f32> = t.to_vec().unwrap();
        eprintln!("rank {}: {mode:?} {mean:?}, one process {want:?}", env.rank);
        assert_close(&format!("{mode:?} on {world} GPUs"), &mean, &want, 1e-5);
    }
}

/// One process per GPU (two or more): data-parallel GPT-2, plain and ZeRO-1, against one
/// process with the whole batch.
#[test]
fn one_process_per_gpu_trains_as_one_process() {
    let _gpus = gpus_lock();
    if std::env::var_os("GENESIS_DIST_DDP_CHILD").is_some() {
        return;
    }
    if let Some(why) = skip(2) {
        eprintln!("skipped: {why}");
        return;
    }
    let n = gpus();
    launch_ranks("rank_of_a_launched_ddp_group", "GENESIS_DIST_DDP_CHILD", n);
    eprintln!("{n} processes: DDP and ZeRO-1 losses within 1e-5 of one process");
}
