//! The per-op profile (`genesis::autograd::profile`): recorded forwards and backward nodes are
//! counted and timed by op and phase.

use genesis::{DType, Device, Tensor, autograd::profile};

#[test]
fn the_profile_counts_each_recorded_op_and_its_backward() -> genesis::Result<()> {
    profile::enable(true);
    profile::reset();
    let x = Tensor::ones([4, 8], DType::F32, Device::Cpu)?.requires_grad_(true)?;
    for _ in 0..3 {
        x.mul(2.0)?.tanh()?.sum()?.backward()?;
    }
    let report = profile::report();
    profile::enable(false);
    let row = |op: &str, phase: &str| -> Option<Vec<String>> {
        report
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .find(|w| w.len() == 6 && w[0] == op && w[1] == phase)
    };
    for phase in ["forward", "backward"] {
        let r = row("tanh", phase).unwrap_or_else(|| panic!("no tanh {phase} row in\n{report}"));
        assert_eq!(r[2], "3", "{report}");
        let (total, mean, longest): (f64, f64, f64) = (
            r[3].parse().unwrap(),
            r[4].parse().unwrap(),
            r[5].parse().unwrap(),
        );
        assert!(
            total >= 0.0 && longest <= total + 1e-3 && mean <= longest + 1e-3,
            "{report}"
        );
    }
    assert!(
        report.lines().next().unwrap().contains("max ms"),
        "{report}"
    );
    Ok(())
}
