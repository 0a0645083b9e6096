#!/usr/bin/env bash
# Runs the Genesis GPU bundle on a GPU machine (written into .gpu/ by `cargo xtask gpu-bundle`).
#
#   bash .gpu/run.sh [tests] [sanitize] [racecheck] [bench] [examples] [training] [torch] [torch-memcheck]
#   (default: all but torch-memcheck)
#
# training: genesis-nn's models on GPU 0 against PyTorch on the same GPU, from the same initial
# parameters on the same batches (crates/genesis-nn/tests/torch_*.py are the twins): the
# digits MLP for 100 Adam steps, the tiny GPT-2 for 50 steps in float32 and under bf16
# autocast; prints the largest relative loss difference of each; then peak memory and step
# time of forward + backward of a transformer block and an MLP beside PyTorch eager's, and ten
# steps of GPT-2 124M under bf16 autocast beside PyTorch eager's.
#
# torch: Genesis as PyTorch's allocator (lib/libgenesis_mem_capi.so, python/genesis_torch),
# python/tests/test_genesis_torch.py, when torch is importable; torch-memcheck: the same under
# compute-sanitizer memcheck.
#
# Logs and JSON go to $OUT; when it is unset, to out/ in the temporary folder of the binaries.
# memcheck runs with --report-api-errors no: tests provoke driver errors on purpose (OOM,
# an image with no code for the GPU) and check them as values; memcheck looks for bad accesses.
# The script's exit status is non-zero when any test, sanitizer run or bench failed; the last
# lines it prints are a summary.
set -u
B=$(cd "$(dirname "$0")" && pwd)
export GENESIS_REPO_ROOT=${GENESIS_REPO_ROOT:-$(cd "$B/.." && pwd)}
# The binaries travel compressed: unpack them next to a copy of this script's folder.
if [ -f "$B/bin.tar.xz" ]; then
  U=$(mktemp -d /tmp/genesis-gpu.XXXXXX)
  xz -dc "$B/bin.tar.xz" | tar -xf - -C "$U"
  cp "$B"/*.py "$B"/run.sh "$U"/ 2>/dev/null
  cp -r "$B"/lib "$B"/python "$U"/ 2>/dev/null
  B=$U
fi
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
steps=${*:-tests sanitize racecheck bench examples training torch}
summary=()
status=0
# GENESIS_ONLY=substring runs only the test binaries whose name contains it;
# GENESIS_BENCH_ONLY=substring only the benches (and PyTorch reference scripts) that contain it
# (`allreduce`: bench-gpu_allreduce beside torch_allreduce.py, the many-GPU figures alone).
tests=$(grep '^test-' "$B/bin/LIST" | grep -- "${GENESIS_ONLY:-}")
bench_only=${GENESIS_BENCH_ONLY:-}
wants() { [ -z "$bench_only" ] || [[ "$1" == *"$bench_only"* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
date -u

for step in $steps; do
  case $step in
    tests)
      : > "$OUT/tests.log"
      for t in $tests; do
        echo "== $t" >> "$OUT/tests.log"
        if "$B/bin/$t" >> "$OUT/tests.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("tests     $t: $r $(grep -E '^test result' "$OUT/tests.log" | tail -1 | cut -c14-60)")
      done
      ;;
    sanitize)
      : > "$OUT/sanitize.log"
      for t in $tests $(grep '^example-quickstart' "$B/bin/LIST"); do
        case $t in test-*) args=--test-threads=1 ;; *) args= ;; esac
        echo "== memcheck $t" >> "$OUT/sanitize.log"
        log=$(mktemp)
        if compute-sanitizer --tool memcheck --error-exitcode 99 --leak-check full --report-api-errors no \
             "$B/bin/$t" $args > "$log" 2>&1; then
          r="clean: $(grep -E 'ERROR SUMMARY' "$log" | tail -1 | sed 's/=* *//')"
        elif grep -q 'terminated before first instrumented API call' "$log"; then
          r="n/a: makes no CUDA call"
        else
          r="FAILED: $(grep -E 'ERROR SUMMARY' "$log" | tail -1 | sed 's/=* *//')"; status=1
        fi
        cat "$log" >> "$OUT/sanitize.log"; rm -f "$log"
        summary+=("memcheck  $t: $r")
      done
      ;;
    racecheck)
      # Kernels with shared memory (tiled transpose, reductions, matmul, scans, sorts, layer
      # norm, activation gradients with column sums) under racecheck.
      : > "$OUT/racecheck.log"
      for t in $(grep -E '^test-.*(gpu_copy|gpu_reduce|gpu_everyday|gpu_softmax|gpu_matmul|gpu_layernorm|gpu_grad|genesis-matmul|genesis-masks)$' "$B/bin/LIST" | grep -- "${GENESIS_ONLY:-}"); do
        if compute-sanitizer --tool racecheck --error-exitcode 99 --report-api-errors no \
             "$B/bin/$t" --test-threads=1 >> "$OUT/racecheck.log" 2>&1; then
          r="clean: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1 | sed 's/=* *//')"
        else
          r="FAILED: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1 | sed 's/=* *//')"; status=1
        fi
        summary+=("racecheck $t: $r")
      done
      ;;
    bench)
      : > "$OUT/bench.log"
      for b in $(grep "^bench-" "$B/bin/LIST"); do
        wants "$b" || continue
        echo "== $b" >> "$OUT/bench.log"
        extra=()
        # One process per GPU, as torch_allreduce.py runs under torchrun.
        [ "$b" = bench-gpu_allreduce ] && extra=(--nproc "$(nvidia-smi -L 2>/dev/null | wc -l)")
        if "$B/bin/$b" "${extra[@]}" --json "$OUT/${b#bench-}.json" >> "$OUT/bench.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("bench     $b: $r")
      done
      if wants torch_ref; then
        echo "== torch_ref.py" >> "$OUT/bench.log"
        if python3 "$B/torch_ref.py" "$OUT/torch_ref.json" >> "$OUT/bench.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("torch     torch_ref.py: $r")
      fi
      # PyTorch's side of the fused-kernel benches (flash attention, classifier, layer norm).
      for t in torch_attention torch_fused; do
        wants "$t" || continue
        echo "== $t.py" >> "$OUT/bench.log"
        if python3 "$B/$t.py" >> "$OUT/bench.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("torch     $t.py: $r")
      done
      # PyTorch's side of gpu_allreduce: one process per GPU under torchrun (NVLS off).
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      if wants torch_allreduce; then
        echo "== torch_allreduce.py ($ngpu GPUs)" >> "$OUT/bench.log"
        if NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} python3 -m torch.distributed.run --nproc-per-node "${ngpu:-1}" "$B/torch_allreduce.py" "$OUT/torch_allreduce.json" >> "$OUT/bench.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("torch     torch_allreduce.py: $r")
      fi
      if [ -f "$OUT/gpu_matmul.json" ]; then
        echo "== torch_matmul.py (torch.matmul on gpu_matmul's rows, with the ratios)" >> "$OUT/bench.log"
        if python3 "$B/torch_matmul.py" "$OUT/gpu_matmul.json" "$OUT/torch_matmul.json" >> "$OUT/bench.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("torch     torch_matmul.py: $r")
      fi
      if [ -z "$bench_only" ]; then
        echo "== genesis vs torch" >> "$OUT/bench.log"
        python3 "$B/compare.py" "$OUT/torch_ref.json" "$OUT/gpu_elementwise.json" "$OUT/gpu_storage.json" "$OUT/gpu_index.json" "$OUT/gpu_facade.json" >> "$OUT/bench.log" 2>&1
      fi
      cat "$OUT/bench.log"
      ;;
    examples)
      : > "$OUT/examples.log"
      for e in $(grep '^example-' "$B/bin/LIST"); do
        echo "== $e" >> "$OUT/examples.log"
        case $e in
          example-conformance)
            # The indexing corpora on the GPU executor.
            args=()
            for f in "$GENESIS_REPO_ROOT"/crates/genesis-index/tests/data/*.json; do
              if "$B/bin/$e" "$f" --device cuda >> "$OUT/examples.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
              summary+=("example   $e $(basename "$f"): $r $(tail -1 "$OUT/examples.log")")
            done
            continue ;;
          example-hot_pair) args=(1000000) ;;
          *) args=() ;;
        esac
        if "$B/bin/$e" "${args[@]}" >> "$OUT/examples.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
        summary+=("example   $e: $r")
      done
      ;;
    training)
      log="$OUT/training.log"
      : > "$log"
      if ! python3 -c 'import torch' > /dev/null 2>&1; then
        summary+=("training: skipped (torch is not importable)")
        continue
      fi
      twins="$GENESIS_REPO_ROOT/crates/genesis-nn/tests"
      "$B/bin/example-mlp_init" "$OUT/mlp_init.safetensors" >> "$log" 2>&1
      "$B/bin/example-gpt2_tiny" 0 "$OUT/gpt2_init.safetensors" >> "$log" 2>&1
      for c in "mlp torch_mlp.py mlp_init 100 -" "gpt2 torch_gpt2.py gpt2_init 50 -" "gpt2-bf16 torch_gpt2.py gpt2_init 50 bf16"; do
        set -- $c
        amp=(); [ "$5" = bf16 ] && amp=(bf16)
        if "$B/bin/example-losses" "$1" cuda "$4" > "$OUT/ours_$1.json" 2>> "$log" &&
           python3 "$twins/$2" "$OUT/$3.safetensors" cuda "$4" "${amp[@]}" > "$OUT/torch_$1.json" 2>> "$log"; then
          r=$(python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['losses']; b=json.load(open(sys.argv[2]))['losses']; print('largest relative difference %.3g over %d steps' % (max(abs(x-y)/abs(y) for x,y in zip(a,b)), len(b)))" "$OUT/ours_$1.json" "$OUT/torch_$1.json")
        else
          r=FAILED; status=1
        fi
        summary+=("training  $1 vs PyTorch on cuda: $r")
      done
      # Peak memory and step time of forward + backward: a transformer block and an MLP.
      echo "== genesis" >> "$log"
      "$B/bin/example-train_memory" cuda >> "$log" 2>&1 || status=1
      echo "== pytorch eager" >> "$log"
      python3 "$twins/torch_train_memory.py" cuda >> "$log" 2>&1 || status=1
      # GPT-2 124M (nanoGPT's layout, bf16 autocast), 10 steps of batch 8 x 1024 on byte
      # tokens of the Python standard library, beside PyTorch eager from the same parameters.
      text=$(python3 -c 'import os; print(os.path.dirname(os.__file__))')
      args=(--config 124m --batch 8 --seq 1024 --steps 10 --device cuda --bf16 --text "$text")
      echo "== genesis gpt2 124m" >> "$log"
      "$B/bin/example-gpt2_train" "${args[@]}" --init "$OUT/gpt2_124m_init.safetensors" >> "$log" 2>&1 || status=1
      echo "== pytorch eager gpt2 124m" >> "$log"
      python3 "$twins/torch_gpt2_train.py" "$OUT/gpt2_124m_init.safetensors" "${args[@]}" >> "$log" 2>&1 || status=1
      summary+=("training  memory and step time: see training.log")
      sed -n '/^== genesis/,$p' "$log"
      ;;
    torch|torch-memcheck)
      # Genesis as PyTorch's CUDA allocator: install, two streams, training equal to PyTorch's
      # own step for step through an out-of-memory, statistics (see the script's docstring).
      log="$OUT/$step.log"
      if ! python3 -c 'import torch' > /dev/null 2>&1; then
        summary+=("$step genesis_torch: skipped (torch is not importable)")
        continue
      fi
      if [ ! -f "$B/lib/libgenesis_mem_capi.so" ]; then
        summary+=("$step genesis_torch: FAILED (no lib/libgenesis_mem_capi.so in the bundle)"); status=1
        continue
      fi
      run=(python3 "$B/python/tests/test_genesis_torch.py" --json "$OUT/$step.json")
      if [ "$step" = torch-memcheck ]; then
        run=(compute-sanitizer --tool memcheck --error-exitcode 99 --report-api-errors no "${run[@]}")
      fi
      if GENESIS_TORCH_LIB="$B/lib/libgenesis_mem_capi.so" PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}" \
           "${run[@]}" > "$log" 2>&1; then r=ok; else r=FAILED; status=1; fi
      summary+=("$step genesis_torch: $r $(grep -E 'ERROR SUMMARY' "$log" | tail -1 | sed 's/=* *//')")
      sed -n '/^== summary/,$p' "$log"
      ;;
    ddp)
      # Data-parallel GPT-2 124M on every GPU (GENESIS_DDP_GPUS of them), 8 x 1024 tokens a GPU,
      # in f32 and under bf16 autocast: one GPU at 8 (the scaling baseline), in f32 one GPU
      # with the whole batch too (the losses must match), DDP and ZeRO-1; PyTorch DDP (and
      # ZeroRedundancyOptimizer) from the same parameters, and PyTorch on one GPU under bf16.
      # Not a default step.
      log="$OUT/ddp.log"; : > "$log"
      ngpu=${GENESIS_DDP_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
      text=$(python3 -c 'import os; print(os.path.dirname(os.__file__))')
      common=(--config 124m --seq 1024 --steps 20 --text "$text")
      export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
      ours() { echo "== genesis $*" >> "$log"; "$B/bin/example-gpt2_ddp" "${common[@]}" "$@" >> "$log" 2>&1 || status=1; }
      theirs() {
        local n=$1; shift
        echo "== pytorch $n GPUs $*" >> "$log"
        GENESIS_TWINS="$GENESIS_REPO_ROOT/crates/genesis-nn/tests" python3 -m torch.distributed.run \
          --nproc-per-node "$n" "$B/torch_gpt2_ddp.py" "$OUT/gpt2_ddp_init.safetensors" "${common[@]}" "$@" >> "$log" 2>&1 || status=1
      }
      all=$((8 * ngpu))
      ours --batch 8 --init "$OUT/gpt2_ddp_init.safetensors"
      ours --batch "$all"
      ours --batch "$all" --nproc "$ngpu" --ddp
      ours --batch "$all" --nproc "$ngpu" --zero1
      theirs "$ngpu" --batch "$all"
      theirs "$ngpu" --batch "$all" --zero1
      ours --batch 8 --bf16
      ours --batch "$all" --nproc "$ngpu" --ddp --bf16
      ours --batch "$all" --nproc "$ngpu" --zero1 --bf16
      theirs 1 --batch 8 --bf16
      theirs "$ngpu" --batch "$all" --bf16
      theirs "$ngpu" --batch "$all" --bf16 --zero1
      summary+=("ddp       $ngpu GPUs: see ddp.log")
      grep -E '^(==|median|rank)' "$log"
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done

echo
echo "== summary (exit $status)"
printf '%s\n' "${summary[@]}"
exit $status
