#!/usr/bin/env bash
# Checks that every decision record the tree points at exists, and that code
# points at records by their file, not by a bare "decision N" to look up
# elsewhere (issue 34). Run by make verify.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
while IFS= read -r name; do
    [ -f "docs/decisions/$name" ] || { echo "missing decision record: docs/decisions/$name (referenced in the tree)"; status=1; }
done < <({
    git grep -ohE 'decisions/[0-9]{4}-[A-Za-z0-9._-]+\.md' | sed 's|^decisions/||'
    git grep -ohE '\([0-9]{4}-[A-Za-z0-9._-]+\.md\)' -- 'docs/decisions/*.md' | tr -d '()'
} | sort -u)
# "[decision N](decisions/NNNN-....md)" in hack/bench.sh's markdown is a link, not a bare number.
if bare=$(git grep -nE '\b[Dd]ecisions? [0-9]+\b' -- '*.go' '*.sh' '*.yaml' ':!pkg/generated/' | grep -vE '\[[Dd]ecisions? [0-9]+\]\('); then
    echo "bare decision numbers (write the record's path, docs/decisions/NNNN-title.md):"
    echo "$bare"
    status=1
fi
exit $status
