#!/usr/bin/env bash
# One short run on a CUDA machine: the device tests, then the device benchmarks.
#
#   DEVICE=cuda:0 OUT=/tmp/out bash benchmarks/device_check.sh
#   (a dry run on a CPU: DEVICE=cpu JAX_DEVICE=cpu bash benchmarks/device_check.sh)
#
# Runs from the repository root against src/ (no install: the machine's own torch, JAX, Numba
# and pytest). Every log and figure goes to $OUT (default /tmp/device_check): card.txt (the
# card and the library versions), tests.log, and one file per benchmark (the massively
# parallel rows, 4,096 envs x float32[64] with a sample of 4,096, in steps and files of their
# own). Sized to end within about 8 minutes on one GPU; each step has its own time limit, and
# a failed step does not stop the next ones (the exit status is the number of failed steps).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export RLREPLAY_TEST_DEVICE="${DEVICE:-cuda:0}"
out="${OUT:-/tmp/device_check}"
mkdir -p "$out"
py="${PYTHON:-python3}"
failed=0

step() {  # step NAME SECONDS COMMAND...: run one step, its output to $out/NAME
    local name="$1" limit="$2"
    shift 2
    echo "== $name ($(date +%T))"
    timeout "$limit" "$@" 2>&1 | tee "$out/$name"
    local rc="${PIPESTATUS[0]}"
    [ "$rc" -eq 0 ] || { echo "!! $name exited $rc"; failed=$((failed + 1)); }
}

step card.txt 60 "$py" - <<'PY'
import platform, numpy, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__)
print("python", platform.python_version())
print("card", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
try:
    import jax
    print("jax", jax.__version__, jax.devices())
except Exception as exc:  # noqa: BLE001 - a report line, not a failure
    print("jax unavailable:", exc)
PY

tests=(tests/torch_device tests/contracts/test_storage_torch.py tests/io/test_staging.py)
[ -d tests/torch_buffer ] && tests+=(tests/torch_buffer)
for f in tests/compat/test_alf_device*.py tests/test_hostile_device.py; do
    [ -f "$f" ] && tests+=("$f")
done
[ -f tests/test_accelerator_torch_docs.py ] && tests+=(tests/test_accelerator_torch_docs.py)
step tests.log 240 "$py" -m pytest -q -n0 -p no:cacheprovider -p no:benchmark "${tests[@]}"

step torch_trees.txt 90 "$py" benchmarks/torch_trees.py --device "$RLREPLAY_TEST_DEVICE"
if [ -f benchmarks/torch_device.py ]; then
    step torch_device.txt 150 "$py" benchmarks/torch_device.py --device "$RLREPLAY_TEST_DEVICE" \
        --count-ops --compile --no-parallel
    # 4,096 envs x float32[64], sample 4,096, capacity 1,048,576: its own step and time limit.
    step torch_device_parallel.txt 90 "$py" benchmarks/torch_device.py \
        --device "$RLREPLAY_TEST_DEVICE" --parallel-only --parallel-iters 100
fi
step accelerator.txt 150 "$py" benchmarks/accelerator.py --device "${JAX_DEVICE:-gpu}" --repeats 3 \
    --no-parallel --json "$out/accelerator.json"
step accelerator_parallel.txt 90 "$py" benchmarks/accelerator.py --device "${JAX_DEVICE:-gpu}" \
    --repeats 3 --parallel-only --parallel-iters 100 --json "$out/accelerator_parallel.json"

echo "== done: $failed failed step(s); files in $out"
exit "$failed"
