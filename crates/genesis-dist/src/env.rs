//! A process's place in its group, from the environment `torchrun` (and [`mod@crate::launch`])
//! sets: `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (optional, defaults to `RANK`), `MASTER_ADDR` and
//! `MASTER_PORT` (where rank 0's [`crate::StoreServer`] listens).

use crate::{Error, Result};

/// A process's rank, the group's size, its GPU on the host, and the store's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEnv {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Processes in the group.
    pub world_size: usize,
    /// This process's rank on its host (its GPU).
    pub local_rank: usize,
    /// The store's host.
    pub master_addr: String,
    /// The store's port.
    pub master_port: u16,
}

impl GroupEnv {
    /// The group from the process's environment (see the module documentation).
    pub fn from_env() -> Result<GroupEnv> {
        GroupEnv::from_vars(|name| std::env::var(name).ok())
    }

    /// The group from `var` (a variable's value by name): [`GroupEnv::from_env`] without the
    /// process's environment, for tests and for launchers that build it.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<GroupEnv> {
        fn number<T: std::str::FromStr>(name: &'static str, value: Option<String>) -> Result<T> {
            let value = value.ok_or(Error::Env {
                name,
                reason: "not set".into(),
            })?;
            value.trim().parse().map_err(|_| Error::Env {
                name,
                reason: format!("{value:?} is not a number in range"),
            })
        }
        let rank: usize = number("RANK", var("RANK"))?;
        let world_size: usize = number("WORLD_SIZE", var("WORLD_SIZE"))?;
        if world_size == 0 {
            return Err(Error::Env {
                name: "WORLD_SIZE",
                reason: "must be at least 1".into(),
            });
        }
        if rank >= world_size {
            return Err(Error::Env {
                name: "RANK",
                reason: format!("{rank} is not below WORLD_SIZE {world_size}"),
            });
        }
        let local_rank = match var("LOCAL_RANK") {
            Some(v) => number("LOCAL_RANK", Some(v))?,
            None => rank,
        };
        let master_addr = var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        if master_addr.trim().is_empty() {
            return Err(Error::Env {
                name: "MASTER_ADDR",
                reason: "is empty".into(),
            });
        }
        let master_port: u16 = number("MASTER_PORT", var("MASTER_PORT"))?;
        Ok(GroupEnv {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
        })
    }

    /// `master_addr:master_port`.
    pub fn store_addr(&self) -> String {
        format!("{}:{}", self.master_addr, self.master_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn a_full_environment_reads_back() {
        let env = GroupEnv::from_vars(vars(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap();
        assert_eq!(
            env,
            GroupEnv {
                rank: 3,
                world_size: 4,
                local_rank: 1,
                master_addr: "node0".into(),
                master_port: 29500
            }
        );
        assert_eq!(env.store_addr(), "node0:29500");
    }

    #[test]
    fn missing_and_malformed_variables_are_named() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (&[("WORLD_SIZE", "2"), ("MASTER_PORT", "1")], "RANK"),
            (&[("RANK", "0"), ("MASTER_PORT", "1")], "WORLD_SIZE"),
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")],
                "RANK",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "0"), ("MASTER_PORT", "1")],
                "WORLD_SIZE",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "70000")],
                "MASTER_PORT",
            ),
            (
                &[("RANK", "-1"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "1")],
                "RANK",
            ),
        ];
        for (pairs, want) in cases {
            match GroupEnv::from_vars(vars(pairs)) {
                Err(Error::Env { name, .. }) => assert_eq!(name, want, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
        // Defaults: LOCAL_RANK is RANK, MASTER_ADDR the loopback address.
        let env = GroupEnv::from_vars(vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_PORT", "5"),
        ]))
        .unwrap();
        assert_eq!((env.local_rank, env.master_addr.as_str()), (1, "127.0.0.1"));
    }
}
