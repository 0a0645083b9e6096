#!/usr/bin/env bash
# The two-process CUDA storage sharing test (tests/cuda_ipc.rs) on a GPU machine: each case
# plainly, then under compute-sanitizer memcheck with every process of it instrumented (the
# test binary starts an exporter and an importer process of itself).
#
#   bash crates/genesis-storage/tests/ipc_gpu.sh TEST_BINARY [OUT_DIR]
#
# TEST_BINARY: the `cuda_ipc` test binary built with `--features cuda` (in a `cargo xtask
# gpu-bundle` bundle: bin/test-genesis-storage-cuda_ipc). Logs go to OUT_DIR (default $OUT,
# else the current folder). Exit status 0 only when every case passed, ran (no "skipped")
# and every process under memcheck reported 0 errors; the last lines are a summary.
set -u
bin=${1:?usage: ipc_gpu.sh TEST_BINARY [OUT_DIR]}
out=${2:-${OUT:-.}}
mkdir -p "$out"
status=0
summary=()
for t in gpu::cuda_storage_between_processes_vmm gpu::cuda_storage_between_processes_segments; do
  name=${t#gpu::}
  log="$out/ipc-$name.log"
  if "$bin" --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1; then
    if grep -q "skipped: no CUDA device" "$log"; then r="SKIPPED (no GPU)"; status=1; else r=ok; fi
  else
    r=FAILED; status=1
  fi
  summary+=("plain     $name: $r")
  log="$out/ipc-memcheck-$name.log"
  if compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 \
       --leak-check full --report-api-errors no \
       "$bin" --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1; then
    n=$(grep -c 'ERROR SUMMARY: 0 errors' "$log")
    bad=$(grep 'ERROR SUMMARY' "$log" | grep -vc 'ERROR SUMMARY: 0 errors')
    # Three processes: the test runner, the exporter and the importer.
    if [ "$bad" -eq 0 ] && [ "$n" -ge 3 ]; then r="clean ($n processes)"; else r="FAILED ($n clean summaries, $bad not)"; status=1; fi
  else
    r="FAILED: $(grep -E 'ERROR SUMMARY' "$log" | grep -v ' 0 errors' | head -1 | sed 's/=* *//')"; status=1
  fi
  summary+=("memcheck  $name: $r")
done
printf '%s\n' "${summary[@]}"
exit $status
