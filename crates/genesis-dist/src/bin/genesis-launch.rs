//! `genesis-launch --nproc N [--store ADDR] [--nnodes M --node-rank R [--master HOST:PORT]]
//! PROGRAM [ARGS...]`: N copies of PROGRAM, one a GPU, with `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//! `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR` and `MASTER_PORT` set (as `torchrun
//! --nproc-per-node N [--nnodes M --node-rank R]`). Node 0 serves the group's store (`--store
//! 0.0.0.0:29500` to let other hosts in); the other nodes name it with `--master`. Exits with 0
//! when every process does, else 1 after stopping the others.

use genesis_dist::Launch;

fn usage() -> ! {
    eprintln!(
        "usage: genesis-launch --nproc N [--store HOST:PORT] \
         [--nnodes M --node-rank R [--master HOST:PORT]] PROGRAM [ARGS...]"
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut nproc, mut store, mut master) = (None, None, None);
    let (mut nnodes, mut node_rank) = (Some(1), Some(0));
    let program = loop {
        match args.next().as_deref() {
            Some("--nproc") => nproc = args.next().and_then(|n| n.parse::<usize>().ok()),
            Some("--store") => store = args.next(),
            Some("--master") => master = args.next(),
            Some("--nnodes") => nnodes = args.next().and_then(|n| n.parse::<usize>().ok()),
            Some("--node-rank") => node_rank = args.next().and_then(|n| n.parse::<usize>().ok()),
            Some("-h" | "--help") | None => usage(),
            Some(p) => break p.to_string(),
        }
    };
    let Some(nproc) = nproc.filter(|&n| n > 0) else {
        usage()
    };
    let (Some(nnodes), Some(node_rank)) = (nnodes, node_rank) else {
        usage()
    };
    let mut launch = Launch::new(program, nproc)
        .args(args)
        .nodes(nnodes, node_rank);
    if let Some(s) = store {
        launch = launch.store_addr(s);
    }
    if let Some(m) = master {
        launch = launch.master(m);
    }
    if let Err(e) = launch.run() {
        eprintln!("genesis-launch: {e}");
        std::process::exit(1);
    }
}
