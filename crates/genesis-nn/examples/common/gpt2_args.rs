//! The command-line options that the GPT-2 examples share (`gpt2_train` here, `gpt2_ddp` in
//! genesis-dist, which includes this file): the model's size, the batch, the sequence length,
//! the steps and the device, each checked as clap parses it.

use clap::{Arg, Command};

/// Adds `--config` (tiny, small or 124m), `--batch` (default `batch`), `--seq`, `--steps` and
/// `--device` (cpu or cuda, default `device`) to `cmd`.
pub(crate) fn gpt2_args(cmd: Command, batch: &'static str, device: &'static str) -> Command {
    cmd.arg(
        Arg::new("config")
            .long("config")
            .value_parser(["tiny", "small", "124m"])
            .default_value("tiny"),
    )
    .arg(count("batch", batch))
    .arg(count("seq", "64"))
    .arg(count("steps", "20"))
    .arg(
        Arg::new("device")
            .long("device")
            .value_parser(["cpu", "cuda"])
            .default_value(device),
    )
}

/// Option `--name`, a count (a whole number above 0), `default` when not given.
pub(crate) fn count(name: &'static str, default: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_parser(positive)
        .default_value(default)
}

/// Clap's check of a count: a whole number above 0.
pub(crate) fn positive(s: &str) -> Result<String, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(s.to_string()),
        _ => Err(format!("{s:?} is not a whole number above 0")),
    }
}
