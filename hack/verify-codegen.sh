#!/usr/bin/env bash
# Fails when generated code or the CRD is out of date: regenerates into a
# temporary copy of the repo and diffs it against the working tree.
#
# A pass is remembered beside the Go build cache, keyed by the hash of
# every file the generation reads or writes (the API, the generated code,
# the CRDs, the scripts, go.mod and go.sum, which pin the generators) and
# the Go version: the same inputs give the same output, so they are not
# generated again (8 minutes on a busy 2-core machine, issue 65). An empty
# GOCACHE starts with nothing remembered.
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$REPO_ROOT"
key=$({
    go version
    find pkg/apis pkg/generated artifacts/crd hack/openapi-schema -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum hack/api-rule-violations.list hack/boilerplate.go.txt hack/update-codegen.sh hack/verify-codegen.sh go.mod go.sum
} | sha256sum | cut -d' ' -f1)
passed="$(go env GOCACHE)/proxy-operator/verify-codegen/$key"
if [ -f "$passed" ]; then
    echo "generated files are up to date (these inputs passed before: $passed)"
    exit 0
fi

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
mkdir -p "$(dirname "$passed")"
touch "$passed"
echo "generated files are up to date"
