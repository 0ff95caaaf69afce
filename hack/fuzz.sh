#!/usr/bin/env bash
# Runs every go test -fuzz target for a bounded budget (FUZZTIME, default
# 10s each; CI uses a count such as 2000x, because a time budget can expire
# while the fuzzer still gathers its baseline on a loaded machine, which Go
# reports as a failure). Go allows one fuzz target per invocation, so they
# run in turn.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${FUZZTIME:-10s}
git grep -l '^func Fuzz' -- '*_test.go' | while read -r file; do
    pkg=./$(dirname "$file")
    for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
        echo "== $pkg $target ($fuzztime)"
        go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
    done
done
