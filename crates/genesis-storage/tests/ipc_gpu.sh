#!/usr/bin/env bash
# The two-process CUDA storage sharing test (tests/cuda_ipc.rs) on a GPU machine: each case
# plainly, then under compute-sanitizer memcheck with every process of it instrumented (the
# test binary starts an exporter and an importer process of itself).
#
#   bash crates/genesis-storage/tests/ipc_gpu.sh TEST_BINARY [OUT_DIR]
#
# TEST_BINARY: the `cuda_ipc` test binary built with `--features cuda` (in a `cargo xtask
# gpu-bundle` bundle: bin/test-genesis-storage-cuda_ipc). Logs go to OUT_DIR (default $OUT,
# else the current folder). Exit status 0 only when every case passed, ran (no "skipped"),
# all three processes finished (the runner's test and both roles) and memcheck found no
# error in any of them; the last lines are a summary.
#
# What the log holds: the exporter and importer inherit the runner's stdout and stderr, so
# their test output lands in the log next to the runner's, and each role prints
# "genesis-ipc <role> done" once it has finished and left its device pool empty. Under
# `--target-processes all` compute-sanitizer instruments every process of the tree and prints
# their reports (a child's leak too: the exporter's was seen this way) through its one front
# end, which ends with ONE "ERROR SUMMARY" line for the whole tree, not one per process. So
# the processes are counted from the test output (three "test result: ok. 1 passed", two
# role lines) and the errors from that summary, which must read 0 errors; no summary at all
# (the sanitizer did not run to the end) is a failure.
set -u
bin=${1:?usage: ipc_gpu.sh TEST_BINARY [OUT_DIR]}
out=${2:-${OUT:-.}}
mkdir -p "$out"
status=0
summary=()

# Checks that the three processes of a run finished: prints what is missing, if anything.
processes() {
  local log=$1 passed roles
  # Occurrences, not lines: the processes' output interleaves.
  passed=$(grep -o 'test result: ok\. 1 passed' "$log" | wc -l)
  roles=$(grep -oE 'genesis-ipc (exporter|importer) done' "$log" | wc -l)
  if [ "$passed" -ne 3 ] || [ "$roles" -ne 2 ] \
     || ! grep -q 'genesis-ipc exporter done' "$log" \
     || ! grep -q 'genesis-ipc importer done' "$log"; then
    echo "$passed of 3 processes passed, $roles of 2 roles done"
  fi
}

for t in gpu::cuda_storage_between_processes_vmm gpu::cuda_storage_between_processes_segments; do
  name=${t#gpu::}
  log="$out/ipc-$name.log"
  if "$bin" --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1; then
    missing=$(processes "$log")
    if grep -q "skipped: no CUDA device" "$log"; then r="SKIPPED (no GPU)"; status=1
    elif [ -n "$missing" ]; then r="FAILED ($missing)"; status=1
    else r="ok (3 processes)"; fi
  else
    r=FAILED; status=1
  fi
  summary+=("plain     $name: $r")
  log="$out/ipc-memcheck-$name.log"
  if compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 \
       --leak-check full --report-api-errors no \
       "$bin" --exact "$t" --test-threads=1 --nocapture > "$log" 2>&1; then
    sums=$(grep -c 'ERROR SUMMARY' "$log")
    bad=$(grep 'ERROR SUMMARY' "$log" | grep -vc 'ERROR SUMMARY: 0 errors')
    leaks=$(grep -c 'Leaked [0-9,]* bytes' "$log")
    missing=$(processes "$log")
    if [ "$sums" -ge 1 ] && [ "$bad" -eq 0 ] && [ "$leaks" -eq 0 ] && [ -z "$missing" ]; then
      r="clean (3 processes, $sums summary)"
    else
      r="FAILED ($sums summaries, $bad with errors, $leaks leaks${missing:+, $missing})"; status=1
    fi
  else
    missing=$(processes "$log")
    r="FAILED: $(grep -E 'ERROR SUMMARY' "$log" | grep -v ' 0 errors' | head -1 | sed 's/=* *//')"
    r+=" ($(grep -c 'Leaked [0-9,]* bytes' "$log") leaks; ${missing:-3 processes finished})"
    status=1
  fi
  summary+=("memcheck  $name: $r")
done
printf '%s\n' "${summary[@]}"
exit $status
