//! `x[mask] = value` on every device: the value must broadcast to the indexed shape (NumPy's and
//! PyTorch's rule: leading size-1 dimensions of the value may be dropped, then every size must
//! equal the indexed one or be 1), also when the mask selects nothing. Generated masks (none,
//! some and all set, over the leading dimension, the second or the whole tensor) and value
//! shapes; a refused assignment writes nothing, an accepted one writes the value where the
//! mask is set and nothing else.

#[allow(dead_code)]
mod common;

use common::{Release, devices};
use genesis::{DType, Device, Tensor, s};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Whether a value of shape `v` broadcasts to `target` by NumPy's assignment rule.
fn broadcasts(v: &[usize], target: &[usize]) -> bool {
    let mut v = v;
    while v.len() > target.len() {
        if v[0] != 1 {
            return false;
        }
        v = &v[1..];
    }
    v.iter()
        .rev()
        .zip(target.iter().rev())
        .all(|(&a, &b)| a == b || a == 1)
}

#[test]
fn mask_assignment_checks_the_value_shape_even_when_nothing_is_selected() {
    let _release = Release;
    let mut rng = Lcg(49);
    let mut checked = 0;
    for dev in devices() {
        for round in 0..300 {
            let (rows, cols) = (4usize, 3usize);
            // Which axes the mask covers: 0 (rows), 1 (cols, after `..`) or both.
            let kind = round % 3;
            let mask_len = match kind {
                0 => rows,
                1 => cols,
                _ => rows * cols,
            };
            let density = rng.next() % 3; // none, some, all
            let bits: Vec<bool> = (0..mask_len)
                .map(|_| match density {
                    0 => false,
                    1 => rng.next().is_multiple_of(2),
                    _ => true,
                })
                .collect();
            let selected = bits.iter().filter(|&&b| b).count();
            let target: Vec<usize> = match kind {
                0 => vec![selected, cols],
                1 => vec![rows, selected],
                _ => vec![selected],
            };
            // A value shape near the target: each size the target's, 1, or another.
            let rank = 1 + (rng.next() % 3) as usize;
            let vshape: Vec<usize> = (0..rank)
                .map(|d| {
                    let t = target.len().checked_sub(rank - d).map(|i| target[i]);
                    match (rng.next() % 4, t) {
                        (0 | 1, Some(t)) => t,
                        (2, _) => 1,
                        _ => 2 + (rng.next() % 2) as usize,
                    }
                })
                .collect();
            let x = Tensor::from_slice(
                &(0..rows * cols).map(|i| i as f32).collect::<Vec<_>>(),
                [rows, cols],
                dev,
            )
            .unwrap();
            let before = x.to_vec::<f32>().unwrap();
            let n: usize = vshape.iter().product();
            let value = Tensor::from_slice(
                &(0..n).map(|i| 100.0 + i as f32).collect::<Vec<_>>(),
                &vshape,
                dev,
            )
            .unwrap();
            let (r, mask) = match kind {
                0 => {
                    let m = Tensor::from_bools(&bits, [rows], dev).unwrap();
                    (x.index_put_(&s![&m], &value, false), m)
                }
                1 => {
                    let m = Tensor::from_bools(&bits, [cols], dev).unwrap();
                    (x.index_put_(&s![.., &m], &value, false), m)
                }
                _ => {
                    let m = Tensor::from_bools(&bits, [rows, cols], dev).unwrap();
                    (x.index_put_(&s![&m], &value, false), m)
                }
            };
            let what =
                format!("{dev:?} kind {kind} mask {bits:?} value {vshape:?} target {target:?}");
            let after = x.to_vec::<f32>().unwrap();
            if broadcasts(&vshape, &target) {
                r.unwrap_or_else(|e| panic!("{what}: refused: {e}"));
                // Unselected elements keep their values; selected ones come from the value.
                let set: Vec<bool> = (0..rows * cols)
                    .map(|i| match kind {
                        0 => bits[i / cols],
                        1 => bits[i % cols],
                        _ => bits[i],
                    })
                    .collect();
                for i in 0..rows * cols {
                    if set[i] {
                        assert!(after[i] >= 100.0, "{what}: element {i} not written");
                    } else {
                        assert_eq!(after[i], before[i], "{what}: element {i} written");
                    }
                }
                drop(mask);
            } else {
                assert!(r.is_err(), "{what}: accepted");
                assert_eq!(after, before, "{what}: a refused assignment wrote");
            }
            checked += 1;
        }
    }
    assert!(checked >= 300);
}

/// A host index tensor whose values do not match its shape is refused, for masks as for
/// integer indices, in reads and in writes (of every length but the right one).
#[test]
fn host_index_tensors_must_hold_one_value_per_element() {
    use genesis::{IndexItem, IndexTensor};
    let x = Tensor::zeros([4, 3], DType::F32, Device::Cpu).unwrap();
    let v = Tensor::ones([1], DType::F32, Device::Cpu).unwrap();
    for shape in [vec![4usize], vec![4, 3], vec![2, 2], vec![0], vec![]] {
        let n: usize = shape.iter().product();
        for len in [0, 1, n.saturating_sub(1), n + 1, 2 * n + 3] {
            if len == n {
                continue;
            }
            let mask = IndexTensor {
                data: vec![1; len],
                ..IndexTensor::mask(&shape, &vec![true; n])
            };
            let ints = IndexTensor::i64(&shape, vec![0; len]);
            for t in [mask, ints] {
                let what = format!("{:?} {shape:?} with {len} values", t.dtype);
                let items = [IndexItem::Tensor(t)];
                assert!(x.i(&items).is_err(), "{what}: read accepted");
                assert!(
                    x.index_put_(&items, &v, false).is_err(),
                    "{what}: write accepted"
                );
                assert_eq!(x.sum().unwrap().to_vec::<f32>().unwrap(), [0.0], "{what}");
            }
        }
    }
}
