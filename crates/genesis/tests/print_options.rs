//! Print options are checked when set (each field against its documented range, a
//! refused set leaving the options as they were), and `Display` never panics under any
//! options that can be set, for tensors of many shapes, dtypes and values.

use std::sync::Mutex;

use genesis::{DType, Device, Error, PrintOptions, Tensor, printoptions, set_printoptions};

/// The options are process-wide: the tests of this file take turns.
static OPTIONS: Mutex<()> = Mutex::new(());

/// Restores the default options when dropped (also when a test fails).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        set_printoptions(PrintOptions::default()).unwrap();
    }
}

fn with(f: impl Fn(PrintOptions) -> PrintOptions) -> PrintOptions {
    f(PrintOptions::default())
}

#[test]
fn options_are_checked_when_set() {
    let _turn = OPTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore;
    let refused = [
        (
            with(|o| PrintOptions {
                precision: PrintOptions::MAX_PRECISION + 1,
                ..o
            }),
            "precision",
        ),
        (
            with(|o| PrintOptions {
                precision: 1 << 20,
                ..o
            }),
            "precision",
        ),
        (
            with(|o| PrintOptions {
                precision: usize::MAX,
                ..o
            }),
            "precision",
        ),
        (with(|o| PrintOptions { linewidth: 0, ..o }), "linewidth"),
        (
            with(|o| PrintOptions {
                edgeitems: PrintOptions::MAX_EDGEITEMS + 1,
                ..o
            }),
            "edgeitems",
        ),
        (
            with(|o| PrintOptions {
                edgeitems: usize::MAX,
                ..o
            }),
            "edgeitems",
        ),
    ];
    let before = with(|o| PrintOptions { precision: 2, ..o });
    set_printoptions(before).unwrap();
    for (opts, field) in refused {
        match set_printoptions(opts) {
            Err(Error::InvalidPrintOption { option, .. }) => assert_eq!(option, field),
            other => panic!("{opts:?}: {other:?}"),
        }
        assert_eq!(printoptions(), before, "a refused set changes nothing");
    }
    let accepted = [
        with(|o| PrintOptions { precision: 0, ..o }),
        with(|o| PrintOptions {
            precision: PrintOptions::MAX_PRECISION,
            ..o
        }),
        with(|o| PrintOptions { threshold: 0, ..o }),
        with(|o| PrintOptions {
            threshold: usize::MAX,
            ..o
        }),
        with(|o| PrintOptions { edgeitems: 0, ..o }),
        with(|o| PrintOptions {
            edgeitems: PrintOptions::MAX_EDGEITEMS,
            ..o
        }),
        with(|o| PrintOptions { linewidth: 1, ..o }),
        with(|o| PrintOptions {
            linewidth: usize::MAX,
            ..o
        }),
    ];
    for opts in accepted {
        set_printoptions(opts).unwrap();
        assert_eq!(printoptions(), opts);
    }
}

/// Tensors of many shapes, dtypes and values (NaN, infinities, huge, tiny, negative).
fn zoo() -> Vec<Tensor> {
    let shapes: [&[usize]; 12] = [
        &[],
        &[0],
        &[1],
        &[5],
        &[3, 4],
        &[0, 3],
        &[2, 3, 4],
        &[1, 1, 1, 1, 1],
        &[7, 1, 9],
        &[10, 10, 12],
        &[2; 11],
        &[1500],
    ];
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e300,
        -1e-300,
        3.25,
        -0.0,
        123456789.0,
        1e-5,
        7.0,
    ];
    let mut out = Vec::new();
    for (s, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n)
            .map(|i| {
                if (i + s) % 3 == 0 {
                    specials[(i + s) % specials.len()]
                } else {
                    (i as f64 - n as f64 / 2.0) * 0.37
                }
            })
            .collect();
        let base = Tensor::from_slice(&values, *shape, Device::Cpu).unwrap();
        for dtype in DType::ALL {
            // Casting NaN or infinities to an integer dtype is the cast's own concern: integer
            // tensors get finite values.
            let t = if dtype.is_float() {
                base.to_dtype(dtype).unwrap()
            } else {
                let finite: Vec<i64> = (0..n).map(|i| i as i64 * 37 - 200).collect();
                Tensor::from_slice(&finite, *shape, Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            out.push(t);
        }
        // A non-contiguous view.
        if shape.len() >= 2 {
            out.push(base.transpose(0, -1).unwrap());
        }
    }
    out
}

/// What every printed tensor satisfies, whatever the options.
fn check_shape_of_output(t: &Tensor, opts: &PrintOptions, s: &str) {
    assert!(s.starts_with("tensor(") && s.ends_with(')'), "{s}");
    assert_eq!(s.matches('[').count(), s.matches(']').count(), "{s}");
    let summarised = t.numel() > opts.threshold;
    if t.numel() > 0 && !summarised && t.dim() > 0 {
        assert!(!s.contains("..."), "{opts:?}: {s}");
        // One comma between every two elements shown (suffixes come after the last `]`).
        let body = &s[..=s.rfind(']').unwrap()];
        assert_eq!(body.matches(',').count() + 1, t.numel(), "{opts:?}: {s}");
    }
    if summarised && t.numel() > 0 && t.shape().iter().any(|&d| d > 2 * opts.edgeitems) {
        assert!(s.contains("..."), "{opts:?}: {s}");
    }
    if opts.linewidth == usize::MAX && t.dim() <= 1 {
        assert!(!s.contains('\n'), "{opts:?}: {s}");
    }
}

#[test]
fn display_never_panics_under_any_options() {
    let _turn = OPTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore;
    let tensors = zoo();
    let mut combos = 0usize;
    let mut printed = 0usize;
    for precision in [0, 1, 4, 17, 100, PrintOptions::MAX_PRECISION] {
        for threshold in [0, 1, 5, 1000, usize::MAX] {
            for edgeitems in [0, 1, 3, PrintOptions::MAX_EDGEITEMS] {
                for linewidth in [1, 2, 80, usize::MAX] {
                    for sci_mode in [None, Some(true), Some(false)] {
                        let opts = PrintOptions {
                            precision,
                            threshold,
                            edgeitems,
                            linewidth,
                            sci_mode,
                        };
                        set_printoptions(opts).unwrap();
                        // A few tensors per combination (the whole zoo for the defaults'
                        // neighbours), chosen so that every tensor meets many combinations.
                        let every = if precision == 4 && sci_mode.is_none() {
                            1
                        } else {
                            37
                        };
                        for t in tensors.iter().skip(combos % every).step_by(every) {
                            let s = t.to_string();
                            check_shape_of_output(t, &opts, &s);
                            printed += 1;
                        }
                        combos += 1;
                    }
                }
            }
        }
    }
    assert_eq!(combos, 6 * 5 * 4 * 4 * 3);
    assert!(printed > 10_000, "{printed}");
}

#[test]
fn precision_and_width_are_honoured() {
    let _turn = OPTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore;
    let t = Tensor::from_slice(&[0.5f64, 0.25], [2], Device::Cpu).unwrap();
    for precision in [0usize, 1, 2, 10, 300, PrintOptions::MAX_PRECISION] {
        set_printoptions(PrintOptions {
            precision,
            ..PrintOptions::default()
        })
        .unwrap();
        let s = t.to_string();
        // Python's `f"{0.25:.{p}f}"`: exact digits, then zeros.
        let want = |v: f64| format!("{v:.precision$}");
        assert!(s.contains(&want(0.25)), "{precision}: {s}");
        assert!(s.contains(&want(0.5)), "{precision}: {s}");
    }
    // Linewidth 1: one element per line.
    set_printoptions(PrintOptions {
        linewidth: 1,
        ..PrintOptions::default()
    })
    .unwrap();
    let t = Tensor::from_slice(&[1i64, 2, 3], [3], Device::Cpu).unwrap();
    assert_eq!(t.to_string(), "tensor([1,\n        2,\n        3])");
    // Threshold 0, edge items 0: every non-empty tensor is summarised to `...` and its size.
    set_printoptions(PrintOptions {
        threshold: 0,
        edgeitems: 0,
        ..PrintOptions::default()
    })
    .unwrap();
    assert_eq!(t.to_string(), "tensor([...], size=(3,))");
    // The largest edge items show everything.
    set_printoptions(PrintOptions {
        threshold: 0,
        edgeitems: PrintOptions::MAX_EDGEITEMS,
        ..PrintOptions::default()
    })
    .unwrap();
    assert_eq!(t.to_string(), "tensor([1, 2, 3])");
}
