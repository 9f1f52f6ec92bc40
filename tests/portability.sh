#!/usr/bin/env bash
# The threshold-bearing tests (marker `portability`) under each CPU variation that exists in the
# field, then every fixed threshold's margin over them: the room between the worst value and its
# bound must be at least 10× the value's spread over the variations (tests/support/margins.py).
#
#   tests/portability.sh           six variations: ATen kernels `default` (no SIMD), `avx2` and
#                                  the CPU's own (AVX-512 where it has it) × 1 and 2 threads
#   tests/portability.sh --quick   the two extremes, `default` on 1 thread and the CPU's own on
#                                  2: what `make test` runs
#   tests/portability.sh --list    the test files it runs: those that name the `margin` fixture
#                                  (collecting only them saves each variation a full
#                                  collection; tests/test_portability.py checks the list)
#
# Two variations run at a time (JOBS=…); their results do not depend on the load, only their
# time. Extra arguments go to pytest (e.g. `-k lora_twins`). PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
JOBS=${JOBS:-2}
mapfile -t files < <(grep -rlE '\bmargin\b' tests --include='test_*.py' | sort)
if [[ ${1:-} == --list ]]; then
    printf '%s\n' "${files[@]}"
    exit 0
fi
variations=(default:1 avx2:1 native:1 default:2 avx2:2 native:2)
if [[ ${1:-} == --quick ]]; then
    variations=(default:1 native:2)
    shift
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_variation() {  # kernels threads [pytest args…]
    local kernels=$1 threads=$2
    shift 2
    if [[ $kernels == native ]]; then
        unset ATEN_CPU_CAPABILITY
    else
        export ATEN_CPU_CAPABILITY=$kernels
    fi
    GAUGELAB_TEST_THREADS=$threads GAUGELAB_MARGINS="$out/$kernels-${threads}t.jsonl" \
        "$PYTHON" -m pytest -m portability -n 0 -p no:cacheprovider "${files[@]}" "$@"
}

for variation in "${variations[@]}"; do
    name=${variation%:*}-${variation#*:}t
    (
        status=0
        run_variation "${variation%:*}" "${variation#*:}" "$@" > "$out/$name.log" 2>&1 || status=$?
        echo "$status" > "$out/$name.status"
    ) &
    while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
done
wait
failed=0
for variation in "${variations[@]}"; do
    name=${variation%:*}-${variation#*:}t
    echo "portability: ATen kernels ${variation%:*}, ${variation#*:} thread(s)"
    tail -n 30 "$out/$name.log"
    [[ $(cat "$out/$name.status") == 0 ]] || failed=1
done
(( failed == 0 )) || { echo "portability: a variation failed (above)" >&2; exit 1; }
"$PYTHON" -m tests.support.margins "$out"
