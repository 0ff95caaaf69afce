#!/usr/bin/env bash
# Builds one pinned tool from its own module under hack/tools/<name>/ into
# <repo>/bin/<name>: helm (chart lint and render) and promtool (alert rule
# tests), which artifacts/'s tests run. Each has its own module because their
# dependency graphs must not move the versions hack/tools pins for
# kube-apiserver and etcd. Cheap when nothing changed: bin/.<name>-version
# holds a stamp of the inputs. Called by `make testenv`.
#
#   hack/tools/build-tool.sh helm|promtool
set -euo pipefail

name="${1:?usage: build-tool.sh helm|promtool}"
tools_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module_dir="${tools_dir}/${name}"
repo_root="$(cd "${tools_dir}/../.." && pwd)"
bin_dir="${repo_root}/bin"
stamp_file="${bin_dir}/.${name}-version"
[[ -f "${module_dir}/go.mod" ]] || { echo "build-tool.sh: no module ${module_dir}" >&2; exit 2; }

mkdir -p "${bin_dir}"
if command -v flock >/dev/null 2>&1; then
	exec 9>"${bin_dir}/.${name}.lock"
	flock 9
fi

# This script is part of the stamp because the ldflags live here.
stamp="$(cat "${module_dir}/go.mod" "${module_dir}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -x "${bin_dir}/${name}" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${stamp}" ]]; then
	echo "bin/: ${name} up to date"
	exit 0
fi
rm -f "${stamp_file}"

export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0

case "${name}" in
helm)
	mod=helm.sh/helm/v4
	pkg=helm.sh/helm/v4/cmd/helm
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	# helm version prints this; without it, "v4.3".
	ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${version}"
	;;
promtool)
	mod=github.com/prometheus/prometheus
	pkg=github.com/prometheus/prometheus/cmd/promtool
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w -X github.com/prometheus/common/version.Version=${version}"
	;;
*)
	echo "build-tool.sh: unknown tool ${name}" >&2
	exit 2
	;;
esac

start=${SECONDS}
# Written beside the target and renamed: an interrupted build never leaves a
# truncated binary that looks usable.
go build -C "${module_dir}" -trimpath -ldflags "${ldflags}" -o "${bin_dir}/${name}.tmp" "${pkg}"
mv -f "${bin_dir}/${name}.tmp" "${bin_dir}/${name}"
echo "built bin/${name} ${version} ($((SECONDS - start))s)"
echo "${stamp}" >"${stamp_file}"
