#!/usr/bin/env bash
# Builds one pinned tool from its own module under hack/tools/<name>/ into
# <repo>/bin/: helm (chart lint and render) and promtool (alert rule tests),
# which artifacts/'s tests run; containerd (containerd, containerd-shim-runc-v2,
# ctr) and cni-plugins (bin/cni/: bridge, host-local, loopback, portmap), the
# runtime and Pod network of make cluster's node; coredns (its cluster DNS,
# run as a Deployment from make image's coredns image) and kube-router (its
# NetworkPolicy enforcement, the network policy controller alone). Each has
# its own module because their dependency graphs must not move the versions
# hack/tools pins for kube-apiserver and etcd. Cheap when nothing changed:
# bin/.<name>-version holds a stamp of the inputs. Called by `make testtools`
# (helm, promtool) and `make cluster-tools` (the others).
#
#   hack/tools/build-tool.sh helm|promtool|containerd|cni-plugins|coredns|kube-router
set -euo pipefail

name="${1:?usage: build-tool.sh helm|promtool|containerd|cni-plugins|coredns|kube-router}"
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
# The binary that proves the tool was built (containerd's set and the CNI
# plugins are built together, so one stands for all).
case "${name}" in
cni-plugins) marker="${bin_dir}/cni/portmap" ;;
*) marker="${bin_dir}/${name}" ;;
esac
if [[ -x "${marker}" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${stamp}" ]]; then
	echo "bin/: ${name} up to date"
	exit 0
fi
rm -f "${stamp_file}"

export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0
tags=""
out_dir="${bin_dir}"

case "${name}" in
helm)
	mod=helm.sh/helm/v4
	pkgs=(helm.sh/helm/v4/cmd/helm)
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	# helm version prints this; without it, "v4.3".
	ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${version}"
	;;
promtool)
	mod=github.com/prometheus/prometheus
	pkgs=(github.com/prometheus/prometheus/cmd/promtool)
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w -X github.com/prometheus/common/version.Version=${version}"
	# The tests run `promtool check rules` and `promtool test rules`, which
	# need no service discovery: Prometheus's own tag leaves out every
	# discovery plugin (and the cloud SDKs and client-go they pull in).
	tags="remove_all_sd"
	;;
containerd)
	mod=github.com/containerd/containerd/v2
	pkgs=("${mod}/cmd/containerd" "${mod}/cmd/containerd-shim-runc-v2" "${mod}/cmd/ctr")
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w -X ${mod}/version.Version=${version}"
	# Static: the snapshotters that need cgo stay out; the node uses overlayfs.
	tags="no_btrfs no_devmapper no_zfs no_aufs"
	;;
cni-plugins)
	mod=github.com/containernetworking/plugins
	pkgs=("${mod}/plugins/main/bridge" "${mod}/plugins/ipam/host-local" "${mod}/plugins/main/loopback" "${mod}/plugins/meta/portmap")
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${version}"
	# kubelet's CNI plugin directory holds nothing else.
	out_dir="${bin_dir}/cni"
	;;
coredns)
	mod=github.com/coredns/coredns
	pkgs=("${mod}")
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w" # coredns --version prints its own CoreVersion
	;;
kube-router)
	mod=github.com/cloudnativelabs/kube-router/v2
	pkgs=("${mod}/cmd/kube-router")
	version="$(go list -C "${module_dir}" -m -f '{{.Version}}' "${mod}")"
	ldflags="-s -w -X ${mod}/pkg/version.Version=${version}"
	;;
*)
	echo "build-tool.sh: unknown tool ${name}" >&2
	exit 2
	;;
esac

mkdir -p "${out_dir}"
for pkg in "${pkgs[@]}"; do
	start=${SECONDS}
	bin="${out_dir}/${pkg##*/}"
	# Written beside the target and renamed: an interrupted build never leaves a
	# truncated binary that looks usable.
	go build -C "${module_dir}" -trimpath -tags "${tags}" -ldflags "${ldflags}" -o "${bin}.tmp" "${pkg}"
	mv -f "${bin}.tmp" "${bin}"
	echo "built ${bin#"${repo_root}/"} ${version} ($((SECONDS - start))s)"
done
echo "${stamp}" >"${stamp_file}"
