//! The interpreter of the facade's differential cases (`tests/data/facade-*.json.gz`, written by
//! `tests/gen_facade_cases.py` with NumPy as the oracle; the format is documented there). Each
//! case runs through the public API only: inputs are built with `from_slice` / `from_bools`
//! (and views of them), the op is the named `Tensor` method, results are read with `to_vec`.

use genesis::{
    BinaryOp, CompareOp, DType, Device, IndexItem, IndexTensor, Tensor, UnaryOp, bf16, f16,
};
use serde_json::Value;

/// The cases of a fixture in `crates/genesis/tests/data`. The GPU bundle runs the test binaries
/// away from the source tree: `GENESIS_REPO_ROOT` says where the repository is (as for the
/// other data-reading tests).
pub(crate) fn load(file: &str) -> Vec<Value> {
    load_format(file, "genesis-facade-cases v1")
}

/// [`load`] for a fixture whose `format` is `format`.
pub(crate) fn load_format(file: &str, format: &str) -> Vec<Value> {
    let path = std::env::var_os("GENESIS_REPO_ROOT")
        .map(|r| std::path::PathBuf::from(r).join("crates/genesis"))
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/data")
        .join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        doc["format"],
        format,
        "{}: not a {format} file",
        path.display()
    );
    match doc["cases"].take() {
        Value::Array(cases) => cases,
        _ => panic!("{}: no cases", path.display()),
    }
}

/// A case's id (`"binary/17"`).
pub(crate) fn id(case: &Value) -> &str {
    case["id"].as_str().unwrap_or("?")
}

/// The family of a case (the part of the id before `/`).
pub(crate) fn family(case: &Value) -> &str {
    id(case).split('/').next().unwrap_or("?")
}

fn dtype(name: &str) -> DType {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("unknown dtype {name}"))
}

/// A number of the data: a JSON integer, or a string Rust's `f64` parser reads exactly.
fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(|i| i as f64)
            .or_else(|| n.as_f64())
            .expect("number"),
        Value::String(s) => s
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad number {s}")),
        _ => panic!("bad number {v}"),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("bad integer {v}"))
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap_or_else(|| panic!("bad list {v}"))
        .iter()
        .map(int)
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    ints(v).into_iter().map(|i| i as usize).collect()
}

fn isizes(v: &Value) -> Vec<isize> {
    ints(v).into_iter().map(|i| i as isize).collect()
}

fn arg_i(case: &Value, name: &str) -> isize {
    int(&case["args"][name]) as isize
}

fn arg_bool(case: &Value, name: &str) -> bool {
    case["args"][name].as_bool().unwrap_or(false)
}

fn arg_str<'c>(case: &'c Value, name: &str) -> &'c str {
    case["args"][name]
        .as_str()
        .unwrap_or_else(|| panic!("{}: argument {name}", id(case)))
}

/// A tensor of the case data (`{"dt", "sh", "d"}`) on `device`, with its `mk` view applied.
pub(crate) fn tensor(t: &Value, device: Device) -> genesis::Result<Tensor> {
    let dt = dtype(t["dt"].as_str().expect("dt"));
    let shape = usizes(&t["sh"]);
    let d = t["d"].as_array().expect("d");
    let base = match dt {
        DType::Bool => {
            let b: Vec<bool> = d.iter().map(|v| int(v) != 0).collect();
            Tensor::from_bools(&b, shape.as_slice(), device)?
        }
        DType::U8 => from(d.iter().map(|v| int(v) as u8), &shape, device)?,
        DType::I8 => from(d.iter().map(|v| int(v) as i8), &shape, device)?,
        DType::I16 => from(d.iter().map(|v| int(v) as i16), &shape, device)?,
        DType::I32 => from(d.iter().map(|v| int(v) as i32), &shape, device)?,
        DType::I64 => from(d.iter().map(int), &shape, device)?,
        DType::F16 => from(d.iter().map(|v| f16::from_f64(num(v))), &shape, device)?,
        DType::BF16 => from(d.iter().map(|v| bf16::from_f64(num(v))), &shape, device)?,
        DType::F32 => from(d.iter().map(|v| num(v) as f32), &shape, device)?,
        DType::F64 => from(d.iter().map(num), &shape, device)?,
    };
    let Some(mk) = t.get("mk") else {
        return Ok(base);
    };
    if let Some(p) = mk.get("perm") {
        base.permute(usizes(p).as_slice())
    } else if let Some(n) = mk.get("narrow") {
        let n = ints(n);
        base.narrow(n[0] as isize, n[1] as usize, n[2] as usize)
    } else if let Some(s) = mk.get("expand") {
        base.expand(usizes(s).as_slice())
    } else if mk.get("t").is_some() {
        base.t()
    } else {
        panic!("unknown view {mk}")
    }
}

fn from<T: genesis::WithDType>(
    data: impl Iterator<Item = T>,
    shape: &[usize],
    device: Device,
) -> genesis::Result<Tensor> {
    let v: Vec<T> = data.collect();
    Tensor::from_slice(&v, shape, device)
}

fn binary_op(name: &str) -> BinaryOp {
    BinaryOp::ALL
        .into_iter()
        .find(|o| o.name() == name)
        .unwrap_or_else(|| panic!("unknown binary op {name}"))
}

fn unary_op(name: &str) -> UnaryOp {
    UnaryOp::ALL
        .into_iter()
        .find(|o| o.name() == name)
        .unwrap_or_else(|| panic!("unknown unary op {name}"))
}

fn compare_op(name: &str) -> CompareOp {
    CompareOp::ALL
        .into_iter()
        .find(|o| o.name() == name)
        .unwrap_or_else(|| panic!("unknown comparison {name}"))
}

/// The index items of a case: integers, slices, `"new"`, `"..."`, integer arrays on the host
/// (`i64`) or as tensors on the device (`t64`, `t32`), and masks on the host (`mask`) or on the
/// device (`tmask`), with their shape `sh`.
fn index_items(items: &Value, device: Device) -> genesis::Result<Vec<IndexItem>> {
    use genesis::ToIndex;
    let opt = |v: &Value| v.as_i64();
    let mut out = Vec::new();
    for it in items.as_array().expect("items") {
        out.push(match it {
            Value::Number(_) => IndexItem::Int(int(it)),
            Value::String(s) if s == "new" => IndexItem::NewAxis,
            Value::String(s) if s == "..." => IndexItem::Ellipsis,
            Value::Object(o) if o.contains_key("s") => {
                let s = o["s"].as_array().expect("slice");
                IndexItem::Slice {
                    start: opt(&s[0]),
                    stop: opt(&s[1]),
                    step: opt(&s[2]),
                }
            }
            Value::Object(o) if o.contains_key("i64") => {
                let v = ints(&o["i64"]);
                IndexItem::Tensor(IndexTensor::i64(&[v.len()], v))
            }
            Value::Object(o) if o.contains_key("t64") => {
                let v = ints(&o["t64"]);
                Tensor::from_slice(&v, [v.len()].as_slice(), device)?.to_index_item()
            }
            Value::Object(o) if o.contains_key("t32") => {
                let v: Vec<i32> = ints(&o["t32"]).into_iter().map(|i| i as i32).collect();
                Tensor::from_slice(&v, [v.len()].as_slice(), device)?.to_index_item()
            }
            Value::Object(o) if o.contains_key("mask") || o.contains_key("tmask") => {
                let bits = o.get("mask").or_else(|| o.get("tmask")).expect("mask");
                let m: Vec<bool> = ints(bits).into_iter().map(|b| b != 0).collect();
                let sh = o.get("sh").map_or_else(|| vec![m.len()], usizes);
                if o.contains_key("mask") {
                    IndexItem::Tensor(IndexTensor::mask(&sh, &m))
                } else {
                    Tensor::from_bools(&m, sh.as_slice(), device)?.to_index_item()
                }
            }
            _ => panic!("unknown index item {it}"),
        });
    }
    Ok(out)
}

/// Runs the case's op on `device`; the tensors it gives (several for `max_dim`).
pub(crate) fn run(case: &Value, device: Device) -> genesis::Result<Vec<Tensor>> {
    if let Some(made) = create(case, device) {
        return made.map(|t| vec![t]);
    }
    run_with(case, &inputs(case, device)?, device)
}

/// The case's input tensors on `device`.
pub(crate) fn inputs(case: &Value, device: Device) -> genesis::Result<Vec<Tensor>> {
    case["in"]
        .as_array()
        .expect("in")
        .iter()
        .map(|t| tensor(t, device))
        .collect()
}

/// [`run`] on given input tensors (the case's `in`, built by [`inputs`] and perhaps marked to
/// require gradients).
pub(crate) fn run_with(
    case: &Value,
    inputs: &[Tensor],
    device: Device,
) -> genesis::Result<Vec<Tensor>> {
    let x = &inputs[0];
    let dims = |c: &Value| -> Option<Vec<isize>> {
        let d = &c["args"]["dims"];
        (!d.is_null()).then(|| isizes(d))
    };
    let keep = arg_bool(case, "keepdim");
    let one = |t: genesis::Result<Tensor>| t.map(|t| vec![t]);
    let op = case["op"].as_str().expect("op");
    match op {
        "binary" => {
            let y = &inputs[1];
            one(match arg_str(case, "op") {
                "add" => x.add(y),
                "sub" => x.sub(y),
                "mul" => x.mul(y),
                "div" => x.div(y),
                "maximum" => x.maximum(y),
                "minimum" => x.minimum(y),
                "pow" => x.pow(y),
                o => x.binary(binary_op(o), y),
            })
        }
        "binary_" => {
            let own = tensor(&case["in"][0], device)?; // a fresh tensor
            own.binary_(binary_op(arg_str(case, "op")), &inputs[1])?;
            Ok(vec![own])
        }
        "binary_out" => {
            let mut out = Tensor::zeros(x.shape(), x.dtype(), device)?;
            x.binary_out(binary_op(arg_str(case, "op")), &inputs[1], &mut out)?;
            Ok(vec![out])
        }
        "binary_scalar" => {
            let s = num(&case["args"]["scalar"]);
            one(match arg_str(case, "op") {
                "pow" => x.pow_scalar(s),
                o => x.binary_scalar(binary_op(o), s),
            })
        }
        "compare_scalar" => {
            let s = num(&case["args"]["scalar"]);
            one(match arg_str(case, "op") {
                "eq" => x.eq_scalar(s),
                "ne" => x.ne_scalar(s),
                "lt" => x.lt_scalar(s),
                "le" => x.le_scalar(s),
                "gt" => x.gt_scalar(s),
                "ge" => x.ge_scalar(s),
                o => panic!("unknown comparison {o}"),
            })
        }
        "unary" => one(match arg_str(case, "op") {
            "neg" => x.neg(),
            "abs" => x.abs(),
            "relu" => x.relu(),
            "exp" => x.exp(),
            "log" => x.log(),
            "sqrt" => x.sqrt(),
            "tanh" => x.tanh(),
            "sigmoid" => x.sigmoid(),
            o => x.unary(unary_op(o)),
        }),
        "isnan" => one(x.isnan()),
        "isinf" => one(x.isinf()),
        "isfinite" => one(x.isfinite()),
        "nan_to_num" => {
            let opt = |k: &str| case["args"].get(k).filter(|v| !v.is_null()).map(num);
            let nan = opt("nan").unwrap_or(0.0);
            one(x.nan_to_num(nan, opt("posinf"), opt("neginf")))
        }
        "unary_" => {
            let own = tensor(&case["in"][0], device)?;
            own.unary_(unary_op(arg_str(case, "op")))?;
            Ok(vec![own])
        }
        "unary_out" => {
            let mut out = Tensor::zeros(x.shape(), x.dtype(), device)?;
            x.unary_out(unary_op(arg_str(case, "op")), &mut out)?;
            Ok(vec![out])
        }
        "compare" => {
            let y = &inputs[1];
            one(match arg_str(case, "op") {
                "eq" => x.eq(y),
                "ne" => x.ne(y),
                "lt" => x.lt(y),
                "le" => x.le(y),
                "gt" => x.gt(y),
                "ge" => x.ge(y),
                o => x.compare(compare_op(o), y),
            })
        }
        "where" => one(Tensor::where_cond(x, &inputs[1], &inputs[2])),
        "sum" => one(match dims(case) {
            None => x.sum(),
            Some(d) => x.sum_dim(d.as_slice(), keep),
        }),
        "mean" => one(match dims(case) {
            None => x.mean(),
            Some(d) => x.mean_dim(d.as_slice(), keep),
        }),
        "max" => one(match dims(case) {
            None => x.max(),
            Some(d) => x.amax(d.as_slice(), keep),
        }),
        "min" => one(match dims(case) {
            None => x.min(),
            Some(d) => x.amin(d.as_slice(), keep),
        }),
        "argmax" => one(x.argmax()),
        "argmin" => one(x.argmin()),
        "max_dim" | "min_dim" => {
            let d = arg_i(case, "dim");
            let (v, i) = if op == "max_dim" {
                x.max_dim(d, keep)?
            } else {
                x.min_dim(d, keep)?
            };
            Ok(vec![v, i])
        }
        "argmax_dim" => one(x.argmax_dim(arg_i(case, "dim"), keep)),
        "argmin_dim" => one(x.argmin_dim(arg_i(case, "dim"), keep)),
        "matmul" => one(x.matmul(&inputs[1])),
        "bmm" => one(x.bmm(&inputs[1])),
        "matmul_out" => {
            let shape = usizes(&case["out"]["sh"]);
            let mut out = Tensor::zeros(shape.as_slice(), x.dtype(), device)?;
            x.matmul_out(&inputs[1], &mut out)?;
            Ok(vec![out])
        }
        "cat" | "stack" => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let d = arg_i(case, "dim");
            one(if op == "cat" {
                Tensor::cat(&refs, d)
            } else {
                Tensor::stack(&refs, d)
            })
        }
        "reshape" => one(x.reshape(isizes(&case["args"]["shape"]).as_slice())),
        "view" => one(x.view(isizes(&case["args"]["shape"]).as_slice())),
        "permute" => one(x.permute(usizes(&case["args"]["perm"]).as_slice())),
        "transpose" => one(x.transpose(arg_i(case, "a"), arg_i(case, "b"))),
        "t" => one(x.t()),
        "narrow" => one(x.narrow(
            arg_i(case, "dim"),
            arg_i(case, "start") as usize,
            arg_i(case, "len") as usize,
        )),
        "squeeze" => one(x.squeeze(arg_i(case, "dim"))),
        "unsqueeze" => one(x.unsqueeze(arg_i(case, "dim"))),
        "expand" => one(x.expand(usizes(&case["args"]["shape"]).as_slice())),
        // Without arguments: the whole tensor (the cases of `gen_facade_cases.py`).
        "flatten" => one(match case["args"].get("start") {
            None => x.flatten(0, -1),
            Some(_) => x.flatten(arg_i(case, "start"), arg_i(case, "end")),
        }),
        "ravel" => one(x.ravel()),
        "unflatten" => one(x.unflatten(arg_i(case, "dim"), &isizes(&case["args"]["sizes"]))),
        "split" => x.split(arg_i(case, "size") as usize, arg_i(case, "dim")),
        "split_sizes" => x.split_sizes(&usizes(&case["args"]["sizes"]), arg_i(case, "dim")),
        "chunk" => x.chunk(arg_i(case, "chunks") as usize, arg_i(case, "dim")),
        "repeat" => one(x.repeat(isizes(&case["args"]["reps"]).as_slice())),
        "tile" => one(x.tile(isizes(&case["args"]["reps"]).as_slice())),
        "flip" => one(x.flip(isizes(&case["args"]["dims"]).as_slice())),
        "roll" => one(x.roll(
            &isizes(&case["args"]["shifts"]),
            &isizes(&case["args"]["dims"]),
        )),
        "tril" => one(x.tril(int(&case["args"]["diagonal"]))),
        "triu" => one(x.triu(int(&case["args"]["diagonal"]))),
        "diagonal" => one(x.diagonal(
            int(&case["args"]["offset"]),
            arg_i(case, "dim1"),
            arg_i(case, "dim2"),
        )),
        "nonzero" => one(x.nonzero()),
        "argwhere" => one(x.argwhere()),
        "nonzero_tuple" => x.nonzero_tuple(),
        "unique" | "unique_consecutive" => {
            let (inv, counts) = (arg_bool(case, "inverse"), arg_bool(case, "counts"));
            let (v, i, c) = if op == "unique" {
                x.unique(arg_bool(case, "sorted"), inv, counts)?
            } else {
                x.unique_consecutive(inv, counts)?
            };
            // Each output asked for, in PyTorch's order; one not asked for must be absent.
            if i.is_some() != inv || c.is_some() != counts {
                panic!(
                    "{}: the outputs asked for are not the outputs given",
                    id(case)
                );
            }
            Ok([Some(v), i, c].into_iter().flatten().collect())
        }
        "one_hot" => one(x.one_hot(case["args"]["classes"].as_u64().map(|c| c as usize))),
        "contiguous" => one(x.contiguous()),
        "index" => one(x.i(&index_items(&case["args"]["items"], device)?)),
        "to_dtype" => one(x.to_dtype(dtype(arg_str(case, "dtype")))),
        // The value as a float, or (the PyTorch corpus) as the JSON's kind of Python scalar.
        "masked_fill" => {
            let a = &case["args"];
            one(match a.get("kind").and_then(|k| k.as_str()).unwrap_or("") {
                "bool" => x.masked_fill(&inputs[1], a["value"].as_bool().expect("bool")),
                "int" => x.masked_fill(&inputs[1], int(&a["value"])),
                _ => x.masked_fill(&inputs[1], num(&a["value"])),
            })
        }
        "masked_fill_" => {
            let own = tensor(&case["in"][0], device)?;
            own.masked_fill_(&inputs[1], num(&case["args"]["value"]))?;
            Ok(vec![own])
        }
        "masked_select" => one(x.masked_select(&inputs[1])),
        // The NumPy corpus's `x[items] = value`; the PyTorch corpus's `index_fill(dim, index,
        // value)` is below.
        "index_fill" if case["args"].get("items").is_some() => {
            let own = tensor(&case["in"][0], device)?;
            own.index_put_scalar_(
                &index_items(&case["args"]["items"], device)?,
                num(&case["args"]["value"]),
            )?;
            Ok(vec![own])
        }
        // The PyTorch-oracle ops (`tests/gen_torch_cases.py`).
        "var" | "std" => {
            let corr = num(&case["args"]["correction"]);
            let std = op == "std";
            one(match (dims(case), std) {
                (None, false) => x.var(corr),
                (None, true) => x.std(corr),
                (Some(d), false) => x.var_dim(d.as_slice(), corr, keep),
                (Some(d), true) => x.std_dim(d.as_slice(), corr, keep),
            })
        }
        "prod" => one(match case["args"].get("dim").filter(|d| !d.is_null()) {
            None => x.prod(),
            Some(d) => x.prod_dim(int(d) as isize, keep),
        }),
        "logsumexp" => one(x.logsumexp(dims(case).unwrap_or_default().as_slice(), keep)),
        "all" | "any" => one(match (dims(case), op == "all") {
            (None, true) => x.all(),
            (None, false) => x.any(),
            (Some(d), true) => x.all_dim(d.as_slice(), keep),
            (Some(d), false) => x.any_dim(d.as_slice(), keep),
        }),
        "count_nonzero" => one(x.count_nonzero(dims(case).unwrap_or_default().as_slice())),
        "nansum" => one(x.nansum(dims(case).unwrap_or_default().as_slice(), keep)),
        "nanmean" => one(x.nanmean(dims(case).unwrap_or_default().as_slice(), keep)),
        "vector_norm" => one(x.vector_norm(
            num(&case["args"]["ord"]),
            dims(case).unwrap_or_default().as_slice(),
            keep,
        )),
        "median" => one(x.median()),
        "cumsum" => one(x.cumsum(arg_i(case, "dim"))),
        "cumprod" => one(x.cumprod(arg_i(case, "dim"))),
        "softmax" => one(x.softmax(arg_i(case, "dim"))),
        "log_softmax" => one(x.log_softmax(arg_i(case, "dim"))),
        "sort" => {
            let (v, i) = x.sort(arg_i(case, "dim"), arg_bool(case, "descending"))?;
            Ok(vec![v, i])
        }
        "argsort" => one(x.argsort(arg_i(case, "dim"), arg_bool(case, "descending"))),
        "topk" => {
            let (v, i) = x.topk(
                arg_i(case, "k") as usize,
                arg_i(case, "dim"),
                arg_bool(case, "largest"),
                arg_bool(case, "sorted"),
            )?;
            Ok(vec![v, i])
        }
        "clamp" => {
            // Integer bounds (JSON integers) as Rust integers, as PyTorch's Python ints: they
            // do not promote an integer tensor.
            let arg = |k: &str| case["args"].get(k).filter(|v| !v.is_null());
            let (lo, hi) = (arg("min"), arg("max"));
            if [lo, hi].iter().flatten().all(|v| v.is_i64()) {
                one(x.clamp(lo.map(int), hi.map(int)))
            } else {
                one(x.clamp(lo.map(num), hi.map(num)))
            }
        }
        "lerp" => one(x.lerp(&inputs[1], num(&case["args"]["weight"]))),
        "addcmul" => one(x.addcmul(&inputs[1], &inputs[2], num(&case["args"]["value"]))),
        "addcdiv" => one(x.addcdiv(&inputs[1], &inputs[2], num(&case["args"]["value"]))),
        "index_select" => one(x.index_select(arg_i(case, "dim"), &inputs[1])),
        "gather" => one(x.gather(arg_i(case, "dim"), &inputs[1])),
        "scatter" => one(x.scatter(arg_i(case, "dim"), &inputs[1], &inputs[2])),
        "scatter_add" => one(x.scatter_add(arg_i(case, "dim"), &inputs[1], &inputs[2])),
        "cross" => one(x.cross(&inputs[1], arg_i(case, "dim"))),
        "outer" => one(x.outer(&inputs[1])),
        "diff" => {
            // The optional prepend and append follow the input, in that order.
            let mut rest = inputs[1..].iter();
            let pre = arg_bool(case, "prepend").then(|| rest.next()).flatten();
            let app = arg_bool(case, "append").then(|| rest.next()).flatten();
            one(x.diff(arg_i(case, "n") as usize, arg_i(case, "dim"), pre, app))
        }
        "meshgrid" => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            Tensor::meshgrid(&refs, arg_str(case, "indexing"))
        }
        "lerp_tensor" => one(x.lerp_tensor(&inputs[1], &inputs[2])),
        // Arithmetic by name with a tensor or a scalar operand of the JSON's kind (an integer,
        // a float or a bool: PyTorch's Python scalars promote by kind).
        "arith" | "arith_scalar" => {
            let a = &case["args"];
            let name = arg_str(case, "op");
            macro_rules! apply {
                ($y:expr) => {
                    match name {
                        "add" => x.add($y),
                        "sub" => x.sub($y),
                        "mul" => x.mul($y),
                        "div" => x.div($y),
                        "maximum" => x.maximum($y),
                        "minimum" => x.minimum($y),
                        "pow" => x.pow($y),
                        "floor_divide" => x.floor_divide($y),
                        "div_trunc" => x.div_mode($y, genesis::RoundingMode::Trunc),
                        "remainder" => x.remainder($y),
                        "fmod" => x.fmod($y),
                        "bitwise_and" => x.bitwise_and($y),
                        "bitwise_or" => x.bitwise_or($y),
                        "bitwise_xor" => x.bitwise_xor($y),
                        "atan2" => x.atan2($y),
                        "hypot" => x.hypot($y),
                        o => panic!("unknown arithmetic {o}"),
                    }
                };
            }
            one(if op == "arith" {
                apply!(&inputs[1])
            } else {
                match a["kind"].as_str().unwrap_or("") {
                    "bool" => apply!(a["scalar"].as_bool().expect("bool")),
                    "int" => apply!(int(&a["scalar"])),
                    _ => apply!(num(&a["scalar"])),
                }
            })
        }
        "where_scalar" => {
            // A scalar of the JSON's kind: a Rust bool, i64 or f64 operand.
            let a = &case["args"];
            let scalar = |v: &Value, kind: &str| -> genesis::ScalarValue {
                match kind {
                    "bool" => genesis::ScalarValue::Bool(v.as_bool().expect("bool")),
                    "int" => genesis::ScalarValue::Int(i128::from(int(v))),
                    _ => genesis::ScalarValue::Float(num(v)),
                }
            };
            let c = x;
            one(if a.get("b").is_some() {
                let (p, q) = (
                    scalar(&a["a"], arg_str(case, "akind")),
                    scalar(&a["b"], arg_str(case, "bkind")),
                );
                where_values(c, p, q)
            } else {
                let s = scalar(&a["scalar"], arg_str(case, "kind"));
                if arg_bool(case, "left") {
                    where_scalar_left(c, s, &inputs[1])
                } else {
                    where_scalar_right(c, &inputs[1], s)
                }
            })
        }
        // `k` index tensors after the input, then the values.
        "index_put" => {
            use genesis::ToIndex;
            let k = arg_i(case, "k") as usize;
            let items: Vec<IndexItem> = inputs[1..=k].iter().map(|t| t.to_index_item()).collect();
            one(x.index_put(&items, &inputs[k + 1], arg_bool(case, "accumulate")))
        }
        "logical_and" => one(x.logical_and(&inputs[1])),
        "logical_or" => one(x.logical_or(&inputs[1])),
        "logical_xor" => one(x.logical_xor(&inputs[1])),
        "logical_not" => one(x.logical_not()),
        "softplus" => {
            one(x.softplus_with(num(&case["args"]["beta"]), num(&case["args"]["threshold"])))
        }
        "isclose" => one(x.isclose(
            &inputs[1],
            num(&case["args"]["rtol"]),
            num(&case["args"]["atol"]),
            arg_bool(case, "equal_nan"),
        )),
        "bincount" => one(x.bincount(arg_i(case, "minlength") as usize)),
        "sdpa" => one(x.scaled_dot_product_attention(
            &inputs[1],
            &inputs[2],
            arg_bool(case, "causal"),
            case["args"].get("scale").filter(|v| !v.is_null()).map(num),
        )),
        "cross_entropy" => {
            let reduction = match arg_str(case, "reduction") {
                "mean" => genesis::Reduction::Mean,
                "sum" => genesis::Reduction::Sum,
                _ => genesis::Reduction::None,
            };
            one(x.cross_entropy(&inputs[1], Some(-100), reduction))
        }
        // The optional weight and bias follow the input, in that order.
        "layer_norm" | "rms_norm" => {
            let shape = usizes(&case["args"]["shape"]);
            let mut rest = inputs[1..].iter();
            let w = arg_bool(case, "weight").then(|| rest.next()).flatten();
            let eps = num(&case["args"]["eps"]);
            if op == "layer_norm" {
                let b = arg_bool(case, "bias").then(|| rest.next()).flatten();
                one(x.layer_norm(&shape, w, b, eps))
            } else {
                one(x.rms_norm(&shape, w, eps))
            }
        }
        "einsum" => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            one(Tensor::einsum(arg_str(case, "equation"), &refs))
        }
        "kron" => one(x.kron(&inputs[1])),
        "index_add" => one(x.index_add(
            arg_i(case, "dim"),
            &inputs[1],
            &inputs[2],
            num(&case["args"]["alpha"]),
        )),
        "index_copy" => one(x.index_copy(arg_i(case, "dim"), &inputs[1], &inputs[2])),
        "index_fill" => {
            let a = &case["args"];
            let d = arg_i(case, "dim");
            one(match a.get("kind").and_then(|k| k.as_str()).unwrap_or("") {
                "bool" => x.index_fill(d, &inputs[1], a["value"].as_bool().expect("bool")),
                "int" => x.index_fill(d, &inputs[1], int(&a["value"])),
                _ => x.index_fill(d, &inputs[1], num(&a["value"])),
            })
        }
        "movedim" => one(x.movedim(isizes(&case["args"]["src"]), isizes(&case["args"]["dst"]))),
        "unbind" => x.unbind(arg_i(case, "dim")),
        "hstack" | "vstack" | "dstack" => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            one(match op {
                "hstack" => Tensor::hstack(&refs),
                "vstack" => Tensor::vstack(&refs),
                _ => Tensor::dstack(&refs),
            })
        }
        "rot90" => one(x.rot90(int(&case["args"]["k"]), isizes(&case["args"]["dims"]))),
        "tensordot" => one(x.tensordot(
            &inputs[1],
            isizes(&case["args"]["da"]),
            isizes(&case["args"]["db"]),
        )),
        "aminmax" => {
            let d = case["args"]["dim"].as_i64().map(|d| d as isize);
            x.aminmax(d, keep).map(|(a, b)| vec![a, b])
        }
        "var_mean" | "std_mean" => {
            let (d, corr) = (
                isizes(&case["args"]["dims"]),
                num(&case["args"]["correction"]),
            );
            if op == "var_mean" {
                x.var_mean(d, corr, keep)
            } else {
                x.std_mean(d, corr, keep)
            }
            .map(|(a, b)| vec![a, b])
        }
        "logaddexp" => one(x.logaddexp(&inputs[1])),
        "logaddexp2" => one(x.logaddexp2(&inputs[1])),
        "xlogy" => one(x.xlogy(&inputs[1])),
        "dist" => one(x.dist(&inputs[1], num(&case["args"]["p"]))),
        "frac" => one(x.frac()),
        "deg2rad" => one(x.deg2rad()),
        "rad2deg" => one(x.rad2deg()),
        "sinc" => one(x.sinc()),
        "logit" => {
            let eps = case["args"].get("eps").filter(|v| !v.is_null()).map(num);
            one(x.logit(eps))
        }
        "heaviside" => one(x.heaviside(&inputs[1])),
        "fliplr" => one(x.fliplr()),
        "flipud" => one(x.flipud()),
        "inner" => one(x.inner(&inputs[1])),
        "diag" => one(x.diag(int(&case["args"]["offset"]))),
        "cartesian_prod" | "block_diag" => {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            one(if op == "cartesian_prod" {
                Tensor::cartesian_prod(&refs)
            } else {
                Tensor::block_diag(&refs)
            })
        }
        "isin" => one(x.isin(&inputs[1], arg_bool(case, "invert"))),
        "trapezoid" => {
            let d = arg_i(case, "dim");
            one(match inputs.get(1) {
                Some(xs) => x.trapezoid_x(xs, d),
                None => x.trapezoid(num(&case["args"]["dx"]), d),
            })
        }
        "vander" => {
            let n = case["args"]["n"].as_u64().map(|n| n as usize);
            one(x.vander(n, arg_bool(case, "increasing")))
        }
        "matrix_power" => one(x.matrix_power(int(&case["args"]["n"]))),
        "inverse" => one(x.inverse()),
        "det" => one(x.det()),
        "logdet" => one(x.logdet()),
        "slogdet" => x.slogdet().map(|(s, l)| vec![s, l]),
        "linalg_solve" => one(x.linalg_solve(&inputs[1])),
        "cummax" | "cummin" => {
            let d = arg_i(case, "dim");
            if op == "cummax" {
                x.cummax(d)
            } else {
                x.cummin(d)
            }
            .map(|(v, i)| vec![v, i])
        }
        "logcumsumexp" => one(x.logcumsumexp(arg_i(case, "dim"))),
        "renorm" => one(x.renorm(
            num(&case["args"]["p"]),
            arg_i(case, "dim"),
            num(&case["args"]["maxnorm"]),
        )),
        "diagflat" => one(x.diagflat(int(&case["args"]["offset"]))),
        "diag_embed" => one(x.diag_embed(
            int(&case["args"]["offset"]),
            arg_i(case, "dim1"),
            arg_i(case, "dim2"),
        )),
        "normalize" => one(x.normalize(
            num(&case["args"]["p"]),
            arg_i(case, "dim"),
            num(&case["args"]["eps"]),
        )),
        "cosine_similarity" => {
            one(x.cosine_similarity(&inputs[1], arg_i(case, "dim"), num(&case["args"]["eps"])))
        }
        "searchsorted" => one(Tensor::searchsorted(x, &inputs[1], arg_bool(case, "right"))),
        "bucketize" => one(inputs[1].bucketize(x, arg_bool(case, "right"))),
        "pad" => {
            let mode = match arg_str(case, "mode") {
                "constant" => genesis::PadMode::Constant,
                "reflect" => genesis::PadMode::Reflect,
                "replicate" => genesis::PadMode::Replicate,
                _ => genesis::PadMode::Circular,
            };
            one(x.pad(
                &ints(&case["args"]["pads"]),
                mode,
                num(&case["args"]["value"]),
            ))
        }
        "equal" => {
            let e = x.equal(&inputs[1])?;
            one(Tensor::from_bools(&[e], [0usize; 0], Device::Cpu))
        }
        "clamp_" => {
            // Python ints stay integers (an int tensor keeps its dtype), floats are floats.
            let bound = |k: &str| case["args"].get(k).filter(|v| !v.is_null());
            let own = tensor(&case["in"][0], device)?;
            if [bound("min"), bound("max")]
                .iter()
                .flatten()
                .all(|v| v.is_i64())
            {
                own.clamp_(bound("min").map(int), bound("max").map(int))?;
            } else {
                own.clamp_(bound("min").map(num), bound("max").map(num))?;
            }
            Ok(vec![own])
        }
        "take_along_dim" => {
            one(x.take_along_dim(&inputs[1], case["args"]["dim"].as_i64().map(|d| d as isize)))
        }
        "mm" => one(x.mm(&inputs[1])),
        "mv" => one(x.mv(&inputs[1])),
        "dot" => one(x.dot(&inputs[1])),
        "trace" => one(x.trace()),
        "addmm" | "baddbmm" => {
            let (beta, alpha) = (num(&case["args"]["beta"]), num(&case["args"]["alpha"]));
            one(if op == "addmm" {
                x.addmm(&inputs[1], &inputs[2], beta, alpha)
            } else {
                x.baddbmm(&inputs[1], &inputs[2], beta, alpha)
            })
        }
        "repeat_interleave" => {
            let dim = case["args"]["dim"].as_i64().map(|d| d as isize);
            match case["args"].get("repeats").and_then(Value::as_u64) {
                Some(r) => one(x.repeat_interleave(r as usize, dim)),
                None => one(x.repeat_interleave_tensor(&inputs[1], dim)),
            }
        }
        o => panic!("{}: unknown op {o}", id(case)),
    }
}

/// The kind of an error as the cases name it: the path of variant names of its `Debug` form
/// (`Storage(UnsupportedDType { .. })` is `Storage.UnsupportedDType`), except that a dimension
/// out of range is `DimOutOfRange` whichever layer finds it (the layout's
/// `Storage.Layout.DimOutOfRange`, the facade's `DimOutOfRange` or an `InvalidArgument`), and
/// a matrix product's inner sizes that differ (`InnerDimMismatch`) are a `ShapeMismatch`.
pub(crate) fn error_kind(e: &genesis::Error) -> String {
    let kind = variant_path(e);
    let dim_range = matches!(e, genesis::Error::InvalidArgument { reason, .. }
        if reason.contains("is out of range for a tensor of"));
    if kind == "Storage.Layout.DimOutOfRange" || dim_range {
        "DimOutOfRange".into()
    } else if kind == "InnerDimMismatch" {
        "ShapeMismatch".into()
    } else {
        kind
    }
}

fn variant_path(e: &genesis::Error) -> String {
    let dbg = format!("{e:?}");
    let mut parts = Vec::new();
    let mut rest = dbg.as_str();
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        parts.push(&rest[..end]);
        if rest[end..].starts_with('(') {
            rest = &rest[end + 1..];
        } else {
            break;
        }
    }
    parts.join(".")
}

/// An element read back, for comparison.
#[derive(Clone, Copy, Debug)]
enum El {
    F(f64),
    I(i64),
}

impl std::fmt::Display for El {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            El::F(v) if *v == 0.0 && v.is_sign_negative() => write!(f, "-0.0"),
            El::F(v) => write!(f, "{v:?}"),
            El::I(v) => write!(f, "{v}"),
        }
    }
}

fn read(t: &Tensor) -> genesis::Result<Vec<El>> {
    let f = |v: Vec<f64>| v.into_iter().map(El::F).collect();
    let i = |v: Vec<i64>| v.into_iter().map(El::I).collect();
    Ok(match t.dtype() {
        DType::Bool => i(t.to_bool_vec()?.into_iter().map(i64::from).collect()),
        DType::U8 => i(t.to_vec::<u8>()?.into_iter().map(i64::from).collect()),
        DType::I8 => i(t.to_vec::<i8>()?.into_iter().map(i64::from).collect()),
        DType::I16 => i(t.to_vec::<i16>()?.into_iter().map(i64::from).collect()),
        DType::I32 => i(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        DType::I64 => i(t.to_vec::<i64>()?),
        DType::F16 => f(t.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect()),
        DType::BF16 => f(t.to_vec::<bf16>()?.into_iter().map(bf16::to_f64).collect()),
        DType::F32 => f(t.to_vec::<f32>()?.into_iter().map(f64::from).collect()),
        DType::F64 => f(t.to_vec::<f64>()?),
    })
}

fn expected(t: &Value) -> Vec<El> {
    let dt = dtype(t["dt"].as_str().expect("dt"));
    t["d"]
        .as_array()
        .expect("d")
        .iter()
        .map(|v| {
            if dt.is_float() {
                El::F(round_to(num(v), dt))
            } else {
                El::I(int(v))
            }
        })
        .collect()
}

/// `v` rounded to the float dtype `dt` (the data holds the shortest digits that round to it).
fn round_to(v: f64, dt: DType) -> f64 {
    match dt {
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::F32 => f64::from(v as f32),
        _ => v,
    }
}

/// How floats are compared (the case's `tol`).
#[derive(Clone, Copy)]
enum Tol {
    Exact,
    Eqv,
    Close(f64, f64),
}

fn tol(case: &Value) -> Tol {
    match &case["tol"] {
        Value::Null => Tol::Exact,
        Value::String(s) if s == "eqv" => Tol::Eqv,
        Value::Array(a) => Tol::Close(num(&a[0]), num(&a[1])),
        t => panic!("{}: bad tol {t}", id(case)),
    }
}

fn matches(got: El, want: El, tol: Tol) -> bool {
    match (got, want) {
        (El::I(g), El::I(w)) => g == w,
        (El::F(g), El::F(w)) => {
            if g.is_nan() || w.is_nan() {
                return g.is_nan() && w.is_nan();
            }
            if g.is_infinite() || w.is_infinite() {
                return g == w;
            }
            match tol {
                Tol::Exact => g == w && g.is_sign_negative() == w.is_sign_negative(),
                Tol::Eqv => g == w,
                Tol::Close(rtol, atol) => (g - w).abs() <= atol + rtol * w.abs(),
            }
        }
        _ => false,
    }
}

/// `where(c, p, q)` for two scalars, each as its kind.
fn where_values(
    c: &Tensor,
    p: genesis::ScalarValue,
    q: genesis::ScalarValue,
) -> genesis::Result<Tensor> {
    use genesis::ScalarValue::{Bool, Float, Int};
    match (p, q) {
        (Bool(a), Bool(b)) => Tensor::where_cond(c, a, b),
        (Bool(a), Int(b)) => Tensor::where_cond(c, a, b as i64),
        (Bool(a), Float(b)) => Tensor::where_cond(c, a, b),
        (Int(a), Bool(b)) => Tensor::where_cond(c, a as i64, b),
        (Int(a), Int(b)) => Tensor::where_cond(c, a as i64, b as i64),
        (Int(a), Float(b)) => Tensor::where_cond(c, a as i64, b),
        (Float(a), Bool(b)) => Tensor::where_cond(c, a, b),
        (Float(a), Int(b)) => Tensor::where_cond(c, a, b as i64),
        (Float(a), Float(b)) => Tensor::where_cond(c, a, b),
    }
}

/// `where(c, s, t)` with the scalar `s` as its kind.
fn where_scalar_left(c: &Tensor, s: genesis::ScalarValue, t: &Tensor) -> genesis::Result<Tensor> {
    use genesis::ScalarValue::{Bool, Float, Int};
    match s {
        Bool(a) => Tensor::where_cond(c, a, t),
        Int(a) => Tensor::where_cond(c, a as i64, t),
        Float(a) => Tensor::where_cond(c, a, t),
    }
}

/// `where(c, t, s)` with the scalar `s` as its kind.
fn where_scalar_right(c: &Tensor, t: &Tensor, s: genesis::ScalarValue) -> genesis::Result<Tensor> {
    use genesis::ScalarValue::{Bool, Float, Int};
    match s {
        Bool(a) => Tensor::where_cond(c, t, a),
        Int(a) => Tensor::where_cond(c, t, a as i64),
        Float(a) => Tensor::where_cond(c, t, a),
    }
}

/// The creation ops (no input tensor): `None` for another op.
fn create(case: &Value, device: Device) -> Option<genesis::Result<Tensor>> {
    let a = &case["args"];
    let f = |k: &str| num(&a[k]);
    let dt = || dtype(a["dtype"].as_str().expect("dtype"));
    Some(match case["op"].as_str()? {
        "arange" => Tensor::arange(f("start"), f("end"), f("step"), dt(), device),
        "triu_indices" | "tril_indices" => {
            let (r, c, o) = (
                int(&a["rows"]) as usize,
                int(&a["cols"]) as usize,
                int(&a["offset"]),
            );
            if case["op"] == "triu_indices" {
                Tensor::triu_indices(r, c, o, device)
            } else {
                Tensor::tril_indices(r, c, o, device)
            }
        }
        "linspace" => Tensor::linspace(
            f("start"),
            f("end"),
            int(&a["steps"]) as usize,
            dt(),
            device,
        ),
        "logspace" => Tensor::logspace(
            f("start"),
            f("end"),
            int(&a["steps"]) as usize,
            f("base"),
            dt(),
            device,
        ),
        "eye" => Tensor::eye(
            int(&a["n"]) as usize,
            a["m"].as_i64().map(|m| m as usize),
            dt(),
            device,
        ),
        _ => return None,
    })
}

/// Compares what the op gave with the case's expectation; a readable diff when they differ.
pub(crate) fn check(case: &Value, got: genesis::Result<Vec<Tensor>>) -> Result<(), String> {
    let got = match (got, case.get("err")) {
        (Err(e), Some(want)) => {
            let kind = error_kind(&e);
            // `"A|B"`: either kind.
            // `"*"`: any typed error (the PyTorch-oracle cases, where PyTorch raised).
            return if want
                .as_str()
                .unwrap_or("")
                .split('|')
                .any(|w| w == kind || w == "*")
            {
                Ok(())
            } else {
                Err(format!("expected error {want}, got error {kind}: {e}"))
            };
        }
        (Err(e), None) => {
            return Err(format!(
                "expected a result, got error {}: {e}",
                error_kind(&e)
            ));
        }
        (Ok(_), Some(want)) => return Err(format!("expected error {want}, got a result")),
        (Ok(t), None) => t,
    };
    let outs: Vec<&Value> = match &case["out"] {
        Value::Array(a) => a.iter().collect(),
        o => vec![o],
    };
    if outs.len() != got.len() {
        return Err(format!(
            "expected {} tensors, got {}",
            outs.len(),
            got.len()
        ));
    }
    let tol = tol(case);
    let mut report = String::new();
    for (k, (want, t)) in outs.into_iter().zip(&got).enumerate() {
        let which = if got.len() > 1 {
            format!("output {k}: ")
        } else {
            String::new()
        };
        let (wdt, wsh) = (want["dt"].as_str().unwrap_or("?"), usizes(&want["sh"]));
        if t.dtype().name() != wdt || t.shape() != wsh.as_slice() {
            report += &format!(
                "{which}expected {wdt} {wsh:?}, got {} {:?}\n",
                t.dtype(),
                t.shape()
            );
            continue;
        }
        let g = read(t).map_err(|e| format!("{which}reading the result: {e}"))?;
        let w = expected(want);
        let bad: Vec<usize> = (0..w.len())
            .filter(|&i| !matches(g[i], w[i], tol))
            .collect();
        if !bad.is_empty() {
            report += &format!(
                "{which}{} of {} elements differ ({wdt} {wsh:?}):\n",
                bad.len(),
                w.len()
            );
            for &i in bad.iter().take(6) {
                report += &format!(
                    "    at {:?}: got {}, expected {}\n",
                    unravel(i, &wsh),
                    g[i],
                    w[i]
                );
            }
        }
    }
    if report.is_empty() {
        Ok(())
    } else {
        Err(report.trim_end().to_string())
    }
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (k, &s) in shape.iter().enumerate().rev() {
        if s > 0 {
            idx[k] = i % s;
            i /= s;
        }
    }
    idx
}

/// A short description of the case for a failure report: op, arguments, input dtypes and
/// shapes (and the view each input is made with).
pub(crate) fn describe(case: &Value) -> String {
    let ins: Vec<String> = case["in"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    let mut s = format!("{}{}", t["dt"].as_str().unwrap_or("?"), t["sh"]);
                    if let Some(mk) = t.get("mk") {
                        s += &format!(".{mk}");
                    }
                    if t["d"].as_array().is_some_and(|d| d.len() <= 8) {
                        s += &format!("={}", t["d"]);
                    }
                    s
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{}({}) args {}",
        case["op"].as_str().unwrap_or("?"),
        ins.join(", "),
        case["args"]
    )
}
