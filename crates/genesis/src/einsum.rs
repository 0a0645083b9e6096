//! `einsum`: Einstein summation over tensors, by PyTorch's rules, on the facade's ops (so it
//! runs on every device and is differentiable).

use crate::{Error, Result, Tensor};

/// A subscript: a letter (0..52: `A`..`Z`, `a`..`z`, in ASCII order) or one dimension of the
/// ellipsis (52 + its position in the broadcast ellipsis, counted from the left).
type Label = usize;

const LETTERS: usize = 52;

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "einsum",
        reason: reason.into(),
    }
}

fn letter(c: char) -> Option<Label> {
    match c {
        'A'..='Z' => Some(c as usize - 'A' as usize),
        'a'..='z' => Some(26 + c as usize - 'a' as usize),
        _ => None,
    }
}

fn name(l: Label) -> String {
    match l {
        0..26 => ((b'A' + l as u8) as char).to_string(),
        26..LETTERS => ((b'a' + (l - 26) as u8) as char).to_string(),
        _ => "...".into(),
    }
}

/// One term of the equation: its letters before and after the ellipsis, and whether it has one.
struct Term {
    before: Vec<Label>,
    after: Vec<Label>,
    ellipsis: bool,
}

fn parse_term(t: &str) -> Result<Term> {
    let (head, tail, ellipsis) = match t.find("...") {
        Some(i) => (&t[..i], &t[i + 3..], true),
        None => (t, "", false),
    };
    let letters = |s: &str| -> Result<Vec<Label>> {
        s.chars()
            .map(|c| {
                letter(c).ok_or_else(|| {
                    bad(format!(
                        "invalid subscript {c:?} in the equation (letters and one '...' a term)"
                    ))
                })
            })
            .collect()
    };
    Ok(Term {
        before: letters(head)?,
        after: letters(tail)?,
        ellipsis,
    })
}

/// A tensor and the label of each of its dimensions.
struct Labelled {
    t: Tensor,
    labels: Vec<Label>,
}

impl Labelled {
    /// The labels of the dimensions whose size is not 1.
    fn sized_labels(&self) -> Vec<Label> {
        self.labels
            .iter()
            .zip(self.t.shape())
            .filter(|&(_, &n)| n != 1)
            .map(|(&l, _)| l)
            .collect()
    }

    /// Sums out the dimensions whose labels `drop` says.
    fn sum_out(self, drop: impl Fn(Label) -> bool) -> Result<Labelled> {
        let dims: Vec<isize> = (0..self.labels.len())
            .filter(|&i| drop(self.labels[i]))
            .map(|i| i as isize)
            .collect();
        if dims.is_empty() {
            return Ok(self);
        }
        let labels = self.labels.iter().copied().filter(|&l| !drop(l)).collect();
        Ok(Labelled {
            t: self.t.sum_dim(dims, false)?,
            labels,
        })
    }

    /// The tensor permuted so its labels are `order`, each dimension expanded to
    /// `size(label)` (size-1 dimensions broadcast): a view.
    fn arranged(&self, order: &[Label], size: &dyn Fn(Label) -> usize) -> Result<Tensor> {
        let perm: Vec<isize> = order
            .iter()
            .map(|l| self.labels.iter().position(|m| m == l).expect("label") as isize)
            .collect();
        let t = self.t.permute(perm)?;
        let want: Vec<usize> = order.iter().map(|&l| size(l)).collect();
        if t.shape() == want.as_slice() {
            Ok(t)
        } else {
            t.expand(want)
        }
    }
}

impl Tensor {
    /// Einstein summation (PyTorch's `torch.einsum`): `equation` names each operand's
    /// dimensions by letters (`"ij,jk->ik"` is a matrix product, `"bij,bjk->bik"` a batched
    /// one, `"ii->i"` a diagonal, `"ii"` a trace, `"i,j->ij"` an outer product), with at most
    /// one `...` a term standing for broadcast leading (or inner) dimensions. Without `->` the
    /// result has the ellipsis's dimensions, then the letters that appear once, in ASCII order
    /// (capitals first). A letter repeated within one operand takes its diagonal; letters
    /// missing from the result are summed; size-1 dimensions broadcast against their letter's
    /// other sizes. Operands are contracted left to right, each pair by one batched
    /// [`Tensor::matmul`] (the operands' dtypes must match, as there); a letter summed within
    /// one operand goes through [`Tensor::sum_dim`] (integers and bools give int64, as
    /// PyTorch's). Differentiable.
    ///
    /// ```
    /// use genesis::{Device, Tensor};
    /// # fn main() -> genesis::Result<()> {
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2], Device::Cpu)?;
    /// let c = Tensor::einsum("ij,jk->ik", &[&a, &b])?;
    /// assert_eq!(c.to_vec::<f32>()?, a.matmul(&b)?.to_vec::<f32>()?);
    /// assert_eq!(Tensor::einsum("ij->ji", &[&a])?.shape(), &[3, 2]);
    /// assert_eq!(Tensor::einsum("ij,ij", &[&a, &a])?.item::<f32>()?, 91.0);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn einsum(equation: &str, operands: &[&Tensor]) -> Result<Tensor> {
        let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Result<_>>()?;
        if terms.len() != operands.len() {
            return Err(bad(format!(
                "the equation has {} operand terms for {} operands",
                terms.len(),
                operands.len()
            )));
        }
        // Each operand's labels; the ellipsis's dimensions right-aligned across operands.
        let mut ell_rank = 0usize;
        for (t, x) in terms.iter().zip(operands) {
            let named = t.before.len() + t.after.len();
            if (!t.ellipsis && named != x.dim()) || (t.ellipsis && named > x.dim()) {
                return Err(bad(format!(
                    "the term of an operand of {} dimensions names {named}",
                    x.dim()
                )));
            }
            if t.ellipsis {
                ell_rank = ell_rank.max(x.dim() - named);
            }
        }
        let mut inputs: Vec<Labelled> = Vec::with_capacity(operands.len());
        for (t, x) in terms.iter().zip(operands) {
            let mut labels = t.before.clone();
            if t.ellipsis {
                let e = x.dim() - t.before.len() - t.after.len();
                labels.extend((ell_rank - e..ell_rank).map(|j| LETTERS + j));
            }
            labels.extend_from_slice(&t.after);
            inputs.push(Labelled {
                t: (*x).clone(),
                labels,
            });
        }
        // The result's labels.
        let ellipsis_labels: Vec<Label> = (0..ell_rank).map(|j| LETTERS + j).collect();
        let output: Vec<Label> = match rhs {
            Some(r) => {
                let t = parse_term(r)?;
                let mut out = t.before.clone();
                if t.ellipsis {
                    out.extend_from_slice(&ellipsis_labels);
                }
                out.extend_from_slice(&t.after);
                for (i, l) in out.iter().enumerate() {
                    if out[..i].contains(l) {
                        return Err(bad(format!(
                            "output subscript {} appears more than once",
                            name(*l)
                        )));
                    }
                    if *l < LETTERS && !inputs.iter().any(|x| x.labels.contains(l)) {
                        return Err(bad(format!(
                            "output subscript {} does not appear in the equation for any input",
                            name(*l)
                        )));
                    }
                }
                out
            }
            None => {
                let mut count = [0usize; LETTERS];
                for x in &inputs {
                    for &l in x.labels.iter().filter(|&&l| l < LETTERS) {
                        count[l] += 1;
                    }
                }
                let mut out = ellipsis_labels.clone();
                out.extend((0..LETTERS).filter(|&l| count[l] == 1));
                out
            }
        };
        // Each label's size: equal across operands, or 1 (broadcast).
        let mut sizes = std::collections::HashMap::<Label, usize>::new();
        for x in &inputs {
            for (&l, &s) in x.labels.iter().zip(x.t.shape()) {
                let e = sizes.entry(l).or_insert(s);
                if *e != s && s != 1 {
                    if *e != 1 {
                        return Err(bad(format!(
                            "subscript {} has size {s} for an operand which does not \
                             broadcast with the size {} seen before",
                            name(l),
                            *e
                        )));
                    }
                    *e = s;
                }
            }
        }
        // Within one operand: diagonals of repeated labels, then the sums of labels no other
        // operand and not the result has.
        let mut ready = Vec::with_capacity(inputs.len());
        for (k, mut x) in inputs.into_iter().enumerate() {
            while let Some((i, j)) = repeated(&x.labels) {
                let l = x.labels[i];
                let (a, b) = (x.t.shape()[i], x.t.shape()[j]);
                if a != b {
                    return Err(bad(format!(
                        "subscript {} is repeated for operand {k} but the sizes don't match, \
                         {a} != {b}",
                        name(l)
                    )));
                }
                x.t = x.t.diagonal(0, i as isize, j as isize)?;
                x.labels.remove(j);
                x.labels.remove(i);
                x.labels.push(l);
            }
            ready.push(x);
        }
        // A label counts in an operand only where its size is not 1 (PyTorch's `dim_last_op`):
        // a `k` of size 3 in one operand and of size 1 in every other broadcasts there, so it
        // is summed within the first, before any product (with infinities, PyTorch's
        // numbers: `inf * (sum of k)`, not a sum of products that meets `inf - inf`).
        let sized: Vec<Vec<Label>> = ready.iter().map(Labelled::sized_labels).collect();
        let mut pending: Vec<Labelled> = Vec::with_capacity(ready.len());
        for (k, x) in ready.into_iter().enumerate() {
            let elsewhere = |l: Label| {
                output.contains(&l)
                    || sized
                        .iter()
                        .enumerate()
                        .any(|(m, ls)| m != k && ls.contains(&l))
            };
            pending.push(x.sum_out(|l| !elsewhere(l))?);
        }
        // Pairwise contractions, left to right.
        let size = |l: Label| sizes[&l];
        let mut it = pending.into_iter();
        let mut acc = it.next().expect("one operand at least");
        let rest: Vec<Labelled> = it.collect();
        for k in 0..rest.len() {
            let later: Vec<Label> = rest[k + 1..]
                .iter()
                .flat_map(Labelled::sized_labels)
                .collect();
            let keep = |l: Label| output.contains(&l) || later.contains(&l);
            // What neither the result nor a later operand (where not of size 1) has is summed
            // within its side before the product, as PyTorch sums a dimension one side lacks.
            let b_labels = rest[k].labels.clone();
            acc = acc.sum_out(|l| !keep(l) && !b_labels.contains(&l))?;
            // A summed label of size 1 in one of the two (it broadcasts) is summed within the
            // other first, as PyTorch's einsum does: `a[k] * b[k]` over a size-1 `a` is
            // `a * sum(b)` (the same numbers, fewer products; with infinities, PyTorch's).
            let acc_labels = acc.labels.clone();
            let mut b = Labelled {
                t: rest[k].t.clone(),
                labels: rest[k].labels.clone(),
            }
            .sum_out(|l| !keep(l) && !acc_labels.contains(&l))?;
            let dim_size = |x: &Labelled, l: Label| {
                x.labels
                    .iter()
                    .position(|&m| m == l)
                    .map(|i| x.t.shape()[i])
            };
            let broadcast: Vec<Label> = acc
                .labels
                .iter()
                .copied()
                .filter(|&l| {
                    !keep(l)
                        && match (dim_size(&acc, l), dim_size(&b, l)) {
                            (Some(x), Some(y)) => (x == 1) != (y == 1),
                            _ => false,
                        }
                })
                .collect();
            if !broadcast.is_empty() {
                acc = acc.sum_out(|l| broadcast.contains(&l))?;
                b = b.sum_out(|l| broadcast.contains(&l))?;
            }
            let b = &b;
            let shared = |l: &Label| b.labels.contains(l);
            let batch: Vec<Label> = acc
                .labels
                .iter()
                .copied()
                .filter(|l| shared(l) && keep(*l))
                .collect();
            let summed: Vec<Label> = acc
                .labels
                .iter()
                .copied()
                .filter(|l| shared(l) && !keep(*l))
                .collect();
            let a_only: Vec<Label> = acc.labels.iter().copied().filter(|l| !shared(l)).collect();
            let b_only: Vec<Label> = b
                .labels
                .iter()
                .copied()
                .filter(|l| !acc.labels.contains(l))
                .collect();
            // The pair's sizes: a label broadcasts only against the other operand of the pair
            // (one kept for a later operand stays of size 1 until that operand, as in PyTorch's
            // pairwise products: expanding it early would multiply, say, an infinity by every
            // later value before their sum, not by the sum).
            let local = |l: Label| match (dim_size(&acc, l), dim_size(b, l)) {
                (Some(1), Some(y)) => y,
                (Some(x), _) | (None, Some(x)) => x,
                (None, None) => 1,
            };
            // Saturating: an empty operand may have huge dimensions (the reshapes then decide).
            let prod = |ls: &[Label]| ls.iter().fold(1usize, |n, &l| n.saturating_mul(local(l)));
            let (bs, m, kk, nn) = (prod(&batch), prod(&a_only), prod(&summed), prod(&b_only));
            let a_order: Vec<Label> = [&batch[..], &a_only, &summed].concat();
            let b_order: Vec<Label> = [&batch[..], &summed, &b_only].concat();
            let a3 = acc.arranged(&a_order, &local)?.reshape([bs, m, kk])?;
            let b3 = b.arranged(&b_order, &local)?.reshape([bs, kk, nn])?;
            let shape: Vec<usize> = batch
                .iter()
                .chain(&a_only)
                .chain(&b_only)
                .map(|&l| local(l))
                .collect();
            acc = Labelled {
                t: a3.matmul(&b3)?.reshape(shape)?,
                labels: [&batch[..], &a_only, &b_only].concat(),
            };
        }
        // Every label left is the result's (the others were summed within their operand or
        // contracted once no later operand had them): the result's order, a view (as
        // PyTorch's: `"ij->ji"` is a transposed view), size-1 dimensions expanded.
        acc.arranged(&output, &size)
    }
}

/// The first pair of dimensions with the same label.
fn repeated(labels: &[Label]) -> Option<(usize, usize)> {
    (0..labels.len()).find_map(|j| {
        labels[..j]
            .iter()
            .position(|&l| l == labels[j])
            .map(|i| (i, j))
    })
}

#[cfg(test)]
mod tests {
    use crate::{Device, Tensor};

    /// A label of size 1 kept for a later operand stays of size 1 until that operand: `d`
    /// below broadcasts against `z`'s 3 only at the last pair, so `x`'s infinity multiplies
    /// the sum over `d`, not each term (PyTorch's `tensor([inf, inf])`; expanded early, the
    /// terms of both signs summed to NaN).
    #[test]
    fn broadcast_label_kept_for_a_later_operand_stays_size_one() {
        let x = Tensor::from_slice(&[f32::NEG_INFINITY, 1.0], [2], Device::Cpu).unwrap();
        let y = Tensor::from_slice(&[3.0f32, 1.0], [2, 1], Device::Cpu).unwrap();
        let z = Tensor::from_slice(
            &[-0.5f32, 1.0, 2.0, 3.0, 0.25, 4.0, 5.0, 6.0, -2.0],
            [3, 3],
            Device::Cpu,
        )
        .unwrap();
        let r = Tensor::einsum("a,bd,dd->b", &[&x, &y, &z]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), [f32::INFINITY, f32::INFINITY]);
        let r = Tensor::einsum("bd,dd->b", &[&y, &z]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), [-6.75, -2.25]);
    }

    /// A label of size 1 in every later operand is summed where it has its size, before the
    /// product (PyTorch 2.11: `inf * (-2.5 - inf - 0) * -0.125` is `inf`; the products first
    /// would meet `-inf + inf` and NaN).
    #[test]
    fn label_of_size_one_later_is_summed_where_it_has_its_size() {
        let x = Tensor::from_slice(&[f32::INFINITY, 1.0], [1, 2], Device::Cpu).unwrap();
        let y = Tensor::from_slice(
            &[-2.5f32, f32::NEG_INFINITY, -0.0, 1.0, 2.0, 3.0],
            [2, 3],
            Device::Cpu,
        )
        .unwrap();
        let z = Tensor::from_slice(&[-0.125f32, 2.0], [1, 2], Device::Cpu).unwrap();
        let r = Tensor::einsum("ed,dk,kd->ed", &[&x, &y, &z]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), [f32::INFINITY, 12.0]);
        let r = Tensor::einsum("ed,dk,kd->e", &[&x, &y, &z]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), [f32::INFINITY]);
    }
}
