//! One process per GPU, as `torchrun --nproc-per-node N` starts them: the launcher runs the
//! group's [`StoreServer`] itself, then starts `N` copies of the program with `RANK`,
//! `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` set (see [`crate::env`]), waits
//! for them, and when one fails stops the others and reports the first failure.
//!
//! Over several hosts (`torchrun --nnodes M --node-rank R`): one launcher a host, each with the
//! same `nproc`; node 0's serves the store (on an address the others reach), the others name
//! it ([`Launch::master`]). Ranks are `R * nproc + local`, `WORLD_SIZE` is `M * nproc`, and
//! `LOCAL_WORLD_SIZE` and `GROUP_RANK` are set as torchrun sets them.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use crate::error::io;
use crate::{Error, Result, StoreServer};

/// A launch: the program, its arguments, how many processes, extra environment.
#[derive(Debug, Clone)]
pub struct Launch {
    program: PathBuf,
    args: Vec<String>,
    nproc: usize,
    addr: String,
    env: Vec<(String, String)>,
    quiet: bool,
    nodes: (usize, usize),
    master: Option<String>,
}

impl Launch {
    /// `nproc` copies of `program` (one a GPU of this host), the store on the loopback
    /// address and a free port.
    pub fn new(program: impl Into<PathBuf>, nproc: usize) -> Launch {
        Launch {
            program: program.into(),
            args: Vec::new(),
            nproc,
            addr: "127.0.0.1:0".into(),
            env: Vec::new(),
            quiet: false,
            nodes: (1, 0),
            master: None,
        }
    }

    /// This launcher is node `node_rank` of `nnodes` hosts, each starting `nproc` processes.
    pub fn nodes(mut self, nnodes: usize, node_rank: usize) -> Launch {
        self.nodes = (nnodes, node_rank);
        self
    }

    /// Where node 0's store listens (`host:port`, reachable from this host): the group's
    /// meeting place for the launchers of nodes other than 0, which serve no store themselves.
    pub fn master(mut self, addr: impl Into<String>) -> Launch {
        self.master = Some(addr.into());
        self
    }

    /// The program's arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Launch {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Where the store listens (`"0.0.0.0:29500"` for other hosts to reach it).
    pub fn store_addr(mut self, addr: impl Into<String>) -> Launch {
        self.addr = addr.into();
        self
    }

    /// One more environment variable for every process.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Launch {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sends the processes' standard output and error nowhere (they inherit the launcher's
    /// otherwise), for callers that read only the outcome.
    pub fn quiet(mut self) -> Launch {
        self.quiet = true;
        self
    }

    /// Starts the store and the processes and waits for them (see [`fn@launch`]).
    pub fn run(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidArgument {
            op: "launch",
            reason,
        };
        let (nnodes, node_rank) = self.nodes;
        if self.nproc == 0 {
            return Err(invalid("nproc must be at least 1".into()));
        }
        if nnodes == 0 || node_rank >= nnodes {
            return Err(invalid(format!(
                "node rank {node_rank} of {nnodes} nodes (0 <= rank < nodes)"
            )));
        }
        // Node 0 serves the store; the others reach it at `master`.
        let (server, host, port) = if node_rank == 0 {
            let server = StoreServer::bind(self.addr.as_str())?;
            let addr = server.local_addr();
            let host = if addr.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                addr.ip().to_string()
            };
            (Some(server), host, addr.port())
        } else {
            let master = self.master.as_deref().ok_or_else(|| {
                invalid(format!(
                    "node {node_rank} needs the master's address (node 0's store)"
                ))
            })?;
            let (host, port) = master
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| invalid(format!("master address {master:?} is not host:port")))?;
            (None, host, port)
        };
        let mut children: Vec<Option<Child>> = Vec::with_capacity(self.nproc);
        for local in 0..self.nproc {
            let rank = node_rank * self.nproc + local;
            let mut cmd = Command::new(&self.program);
            cmd.args(&self.args)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", local.to_string())
                .env("WORLD_SIZE", (nnodes * self.nproc).to_string())
                .env("LOCAL_WORLD_SIZE", self.nproc.to_string())
                .env("GROUP_RANK", node_rank.to_string())
                .env("MASTER_ADDR", &host)
                .env("MASTER_PORT", port.to_string());
            for (k, v) in &self.env {
                cmd.env(k, v);
            }
            if self.quiet {
                cmd.stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null());
            }
            match cmd.spawn() {
                Ok(c) => children.push(Some(c)),
                Err(e) => {
                    stop_all(&mut children);
                    return Err(io(format!(
                        "starting rank {rank} ({})",
                        self.program.display()
                    ))(e));
                }
            }
        }
        let result = wait_all(&mut children);
        drop(server);
        result
    }
}

/// Kills and reaps every process still running.
fn stop_all(children: &mut [Option<Child>]) {
    for c in children.iter_mut().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Waits for every process; at the first failure stops the rest and reports it.
fn wait_all(children: &mut [Option<Child>]) -> Result<()> {
    loop {
        let mut running = 0;
        for rank in 0..children.len() {
            let Some(c) = children[rank].as_mut() else {
                continue;
            };
            match c.try_wait() {
                Ok(Some(status)) if status.success() => children[rank] = None,
                Ok(Some(status)) => {
                    children[rank] = None;
                    stop_all(children);
                    return Err(Error::ProcessFailed {
                        rank,
                        status: status.to_string(),
                    });
                }
                Ok(None) => running += 1,
                Err(e) => {
                    stop_all(children);
                    return Err(io(format!("waiting for rank {rank}"))(e));
                }
            }
        }
        if running == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`Launch::new`]`(program, nproc).args(args).run()`.
pub fn launch(program: impl Into<PathBuf>, args: &[&str], nproc: usize) -> Result<()> {
    Launch::new(program, nproc).args(args.iter().copied()).run()
}
