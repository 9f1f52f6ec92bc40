#!/usr/bin/env bash
# The threshold-bearing tests (marker `portability`) under each CPU variation that exists in the
# field, then every fixed threshold's margin over them: the room between the worst value and its
# bound must be at least 10× the value's spread over the variations (tests/support/margins.py).
#
#   tests/portability.sh           six variations: ATen kernels `default` (no SIMD), `avx2` and
#                                  the CPU's own (AVX-512 where it has it) × 1 and 2 threads
#   tests/portability.sh --quick   the two extremes, `default` on 1 thread and the CPU's own on
#                                  2: what `make test` runs
#
# Extra arguments go to pytest (e.g. `-k lora_twins`). PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
variations=(default:1 avx2:1 native:1 default:2 avx2:2 native:2)
if [[ ${1:-} == --quick ]]; then
    variations=(default:1 native:2)
    shift
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for variation in "${variations[@]}"; do
    kernels=${variation%:*}
    threads=${variation#*:}
    echo "portability: ATen kernels ${kernels}, ${threads} thread(s)"
    if [[ $kernels == native ]]; then
        unset ATEN_CPU_CAPABILITY
    else
        export ATEN_CPU_CAPABILITY=$kernels
    fi
    GAUGELAB_TEST_THREADS=$threads GAUGELAB_MARGINS="$out/$kernels-${threads}t.jsonl" \
        "$PYTHON" -m pytest -m portability -n 0 -p no:cacheprovider "$@"
done
"$PYTHON" -m tests.support.margins "$out"
