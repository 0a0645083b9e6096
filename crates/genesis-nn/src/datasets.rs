//! Small real data sets shipped with the crate (no download).

use std::io::Read;

use genesis::{Device, Error, Result, Tensor};

/// The handwritten digits of scikit-learn's `load_digits` (see `data/README.md`): 1,797
/// images of 8 × 8 pixel counts in `0..=16`, as float32 `[1797, 64]`, and their digits as
/// int64 `[1797]`, on the CPU, in the file's order.
///
/// ```
/// let (images, labels) = genesis_nn::datasets::digits()?;
/// assert_eq!(images.shape(), &[1797, 64]);
/// assert_eq!(labels.to_vec::<i64>()?[..3], [0, 1, 2]);
/// # Ok::<(), genesis::Error>(())
/// ```
pub fn digits() -> Result<(Tensor, Tensor)> {
    const GZ: &[u8] = include_bytes!("../data/digits.csv.gz");
    let bad = |reason: String| Error::InvalidArgument {
        op: "datasets::digits",
        reason,
    };
    let mut text = String::new();
    flate2::read::GzDecoder::new(GZ)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("the embedded file does not decompress: {e}")))?;
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for (row, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let values: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse::<f32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("row {row}: {e}")))?;
        if values.len() != 65 {
            return Err(bad(format!(
                "row {row} has {} values, not 65",
                values.len()
            )));
        }
        pixels.extend_from_slice(&values[..64]);
        labels.push(values[64] as i64);
    }
    let n = labels.len();
    Ok((
        Tensor::from_slice(&pixels, [n, 64], Device::Cpu)?,
        Tensor::from_slice(&labels, [n], Device::Cpu)?,
    ))
}
