use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Where a storage lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory.
    #[default]
    Cpu,
    /// Memory of the CUDA device with this ordinal.
    Cuda(usize),
}

impl Device {
    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

thread_local! {
    static CURRENT_CUDA: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// This thread's current CUDA device: what `"cuda"` stands for (0 unless changed).
pub fn current_cuda_device() -> usize {
    CURRENT_CUDA.with(std::cell::Cell::get)
}

/// Sets this thread's current CUDA device (the facade's `genesis::cuda::set_device` checks the
/// ordinal first).
pub fn set_current_cuda_device(ordinal: usize) {
    CURRENT_CUDA.with(|c| c.set(ordinal));
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `"cpu"`, `"cuda"` (this thread's current CUDA device, 0 unless changed) and
    /// `"cuda:N"`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidDeviceString {
            input: s.to_string(),
        };
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(current_cuda_device())),
            other => {
                let n = other.strip_prefix("cuda:").ok_or_else(bad)?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                n.parse().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for (s, d) in [
            ("cpu", Device::Cpu),
            ("cuda", Device::Cuda(0)),
            ("cuda:3", Device::Cuda(3)),
        ] {
            assert_eq!(s.parse::<Device>().unwrap(), d);
        }
        assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "cuda:+1"] {
            assert!(bad.parse::<Device>().is_err(), "{bad}");
        }
    }
}
