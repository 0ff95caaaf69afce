#!/usr/bin/env bash
# Regenerates everything derived from pkg/apis: deepcopy, register, openapi,
# applyconfigurations, clientset, listers, informers (code-generator's
# kube_codegen.sh) and the CRD (controller-gen). Both tools are pinned in go.mod.
#
# OUTPUT_ROOT (default: the repo) lets verify-codegen.sh generate into a copy.
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
ROOT=${OUTPUT_ROOT:-$REPO_ROOT}
cd "$ROOT"

MODULE=github.com/proxyfleet/proxy-operator
BOILERPLATE="$ROOT/hack/boilerplate.go.txt"
# go list -m prints an empty Dir until the module is in the module cache (a new
# machine has none), so download it first: only go.mod's pinned version.
go mod download k8s.io/code-generator
CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [ ! -f "$CODEGEN_PKG/kube_codegen.sh" ]; then
    echo "update-codegen: kube_codegen.sh not found in k8s.io/code-generator (dir '$CODEGEN_PKG')" >&2
    exit 1
fi
# kube_codegen.sh installs its generators into GOBIN; keep them out of the user's.
export GOBIN="$REPO_ROOT/bin/codegen"
mkdir -p "$GOBIN"
# shellcheck source=/dev/null
source "$CODEGEN_PKG/kube_codegen.sh"

kube::codegen::gen_helpers --boilerplate "$BOILERPLATE" "$ROOT/pkg/apis"
kube::codegen::gen_register --boilerplate "$BOILERPLATE" "$ROOT/pkg/apis"

kube::codegen::gen_openapi \
    --output-dir "$ROOT/pkg/generated/openapi" \
    --output-pkg "$MODULE/pkg/generated/openapi" \
    --extra-pkgs k8s.io/api/core/v1 \
    --report-filename "$ROOT/hack/api-rule-violations.list" \
    --update-report \
    --boilerplate "$BOILERPLATE" \
    "$ROOT/pkg/apis"

# The apply configurations are built from the OpenAPI schema so that the
# generated fake clientset can serve Apply for Proxy (structured merge needs it).
schema=$(mktemp)
trap 'rm -f "$schema"' EXIT
# -trimpath: verify-codegen.sh runs this in a new temporary copy each time,
# and without it the copy's directory is part of every build cache key.
go run -trimpath ./hack/openapi-schema >"$schema"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema "$schema" \
    --applyconfig-externals "k8s.io/api/core/v1.ResourceRequirements:k8s.io/client-go/applyconfigurations/core/v1,k8s.io/api/core/v1.Toleration:k8s.io/client-go/applyconfigurations/core/v1" \
    --output-dir "$ROOT/pkg/generated" \
    --output-pkg "$MODULE/pkg/generated" \
    --boilerplate "$BOILERPLATE" \
    "$ROOT/pkg/apis"

go tool controller-gen crd:allowDangerousTypes=false paths=./pkg/apis/... output:crd:dir="$ROOT/artifacts/crd"
cp "$ROOT"/artifacts/crd/*.yaml "$ROOT"/artifacts/helm/proxy-operator/crds/  # the chart ships them byte for byte (artifacts/install_test.go)
