#!/usr/bin/env bash
# Fails when generated code or the CRD is out of date: regenerates into a
# temporary copy of the repo and diffs it against the working tree.
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tar -C "$REPO_ROOT" --exclude=./bin --exclude=./.local --exclude=./.git -cf - . | tar -C "$tmp" -xf -
OUTPUT_ROOT="$tmp" "$REPO_ROOT/hack/update-codegen.sh" >/dev/null

status=0
for path in pkg/apis pkg/generated artifacts/crd hack/api-rule-violations.list; do
    if ! diff -Nru "$REPO_ROOT/$path" "$tmp/$path"; then
        status=1
    fi
done
if [ "$status" -ne 0 ]; then
    echo "generated files are out of date: run 'make generate'" >&2
    exit 1
fi
echo "generated files are up to date"
