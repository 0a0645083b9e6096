//! `genesis-launch --nproc N [--store ADDR] PROGRAM [ARGS...]`: N copies of PROGRAM, one a GPU,
//! with `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` set and the group's
//! store served by the launcher (as `torchrun --nproc-per-node N`). Exits with 0 when every
//! process does, else 1 after stopping the others.

use genesis_dist::Launch;

fn usage() -> ! {
    eprintln!("usage: genesis-launch --nproc N [--store HOST:PORT] PROGRAM [ARGS...]");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut nproc, mut store) = (None, None);
    let program = loop {
        match args.next().as_deref() {
            Some("--nproc") => nproc = args.next().and_then(|n| n.parse::<usize>().ok()),
            Some("--store") => store = args.next(),
            Some("-h" | "--help") | None => usage(),
            Some(p) => break p.to_string(),
        }
    };
    let Some(nproc) = nproc.filter(|&n| n > 0) else {
        usage()
    };
    let mut launch = Launch::new(program, nproc).args(args);
    if let Some(s) = store {
        launch = launch.store_addr(s);
    }
    if let Err(e) = launch.run() {
        eprintln!("genesis-launch: {e}");
        std::process::exit(1);
    }
}
