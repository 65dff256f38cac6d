#!/usr/bin/env bash
# Longer mutation fuzzing of the native decoders (native/fuzz): SECONDS per decoder (default 600), e.g.
#   bench/fuzz_native.sh 1800
# Prints per decoder the seed, the executions and how many mutants were refused / decoded; a failure
# (panic, a decode over the time bound, peak RSS growth over the memory bound) stops with the saved input.
set -euo pipefail
cd "$(dirname "$0")/../native"
ABTEST_FUZZ_SECONDS="${1:-600}" cargo test --release -p abtest-fuzz -- --nocapture --test-threads 2 2>&1 | grep -E '^fuzz|panicked|test result'
