#!/usr/bin/env bash
# Builds pinned Kubernetes binaries from hack/tools/go.mod into <repo>/bin/:
#
#   hack/tools/build.sh        kube-apiserver, kubectl, etcd (pkg/testing/testenv; make testenv)
#   hack/tools/build.sh node   kubelet, kube-scheduler, kube-controller-manager, kube-proxy
#                              (the real node of make cluster)
#
# Cheap when nothing changed: bin/.tools-version (bin/.node-tools-version) holds a
# stamp of the inputs and the build is skipped while it matches and all binaries exist.
set -euo pipefail

set_name="${1:-control-plane}"

tools_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${tools_dir}/../.." && pwd)"
bin_dir="${repo_root}/bin"
case "${set_name}" in
control-plane)
	stamp_file="${bin_dir}/.tools-version"
	binaries=(kube-apiserver kubectl etcd)
	;;
node)
	stamp_file="${bin_dir}/.node-tools-version"
	binaries=(kubelet kube-scheduler kube-controller-manager kube-proxy)
	;;
*)
	echo "build.sh: unknown set ${set_name} (want node, or nothing for the control plane)" >&2
	exit 2
	;;
esac

mkdir -p "${bin_dir}"

# Two `make testenv` at once must not interleave writes to bin/.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${bin_dir}/.tools.lock"
	flock 9
fi

# build.sh is part of the stamp because the ldflags live here.
stamp="$(cat "${tools_dir}/go.mod" "${tools_dir}/go.sum" "${tools_dir}/build.sh" | sha256sum | cut -d' ' -f1)"

up_to_date=true
[[ -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${stamp}" ]] || up_to_date=false
for b in "${binaries[@]}"; do
	[[ -x "${bin_dir}/${b}" ]] || up_to_date=false
done
if "${up_to_date}"; then
	echo "bin/: ${binaries[*]} up to date"
	exit 0
fi
rm -f "${stamp_file}"

# The tools module must not pick up a go.work of the caller, nor rewrite go.sum.
export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0

k8s_version="$(go list -C "${tools_dir}" -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(go list -C "${tools_dir}" -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
major="${k8s_version#v}"
major="${major%%.*}"
minor="${k8s_version#v*.}"
minor="${minor%%.*}"

# The apiserver derives its emulation version from gitVersion; without these it
# reports v0.0.0-master.
pkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"

# build NAME PACKAGE VERSION LDFLAGS: writes beside the target and renames, so an
# interrupted build never leaves a truncated binary that looks usable.
build() {
	local name="$1" pkg="$2" version="$3" ldflags="$4"
	local start=${SECONDS}
	go build -C "${tools_dir}" -trimpath -ldflags "${ldflags}" -o "${bin_dir}/${name}.tmp" "${pkg}"
	mv -f "${bin_dir}/${name}.tmp" "${bin_dir}/${name}"
	echo "built bin/${name} ${version} ($((SECONDS - start))s)"
}

for b in "${binaries[@]}"; do
	case "${b}" in
	etcd) build etcd go.etcd.io/etcd/server/v3 "${etcd_version}" "-s -w" ;;
	*) build "${b}" "k8s.io/kubernetes/cmd/${b}" "${k8s_version}" "${k8s_ldflags}" ;;
	esac
done

echo "${stamp}" >"${stamp_file}"
