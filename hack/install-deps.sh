#!/usr/bin/env bash
# Installs the Debian packages that tests use as real peers: tinyproxy and
# squid (proxies nobody here wrote), redis-server (the lease benchmark's
# reference), curl, Python requests and Scrapy (real gateway clients), and
# skopeo (reads make image's OCI layouts in hack/image's test), util-linux's
# taskset (the gateway benchmark's placements; Essential, so normally there),
# and what make cluster's node runs beside its own builds: runc (the OCI
# runtime under containerd), iptables (kube-proxy and CNI rules), ipset
# (kube-router's NetworkPolicy sets) and conntrack; chromium, the headless
# browser pkg/testsuites/dashboard drives through chromedp; iproute2's ip, which
# pkg/testing/netnstest makes network namespaces with.
# Idempotent: does nothing when they are all present.
#
#   hack/install-deps.sh           install what is missing (root, or through sudo)
#   hack/install-deps.sh --check   as above when root; otherwise list what is missing
#                                  and fail naming `make deps` (what `make test` runs)
set -o errexit -o nounset -o pipefail

need=()
command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ] || need+=(tinyproxy)
[ -x /usr/sbin/squid ] || need+=(squid)
command -v redis-server >/dev/null || need+=(redis-server)
command -v curl >/dev/null || need+=(curl)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || need+=(python3-requests)
[ -x /usr/bin/scrapy ] || need+=(python3-scrapy)
command -v skopeo >/dev/null || need+=(skopeo)
command -v taskset >/dev/null || need+=(util-linux) # the gateway bench pins processes to cores
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/sbin/iptables ] || need+=(iptables)
[ -x /usr/sbin/ipset ] || need+=(ipset)
[ -x /usr/sbin/conntrack ] || need+=(conntrack)
[ -x /usr/bin/chromium ] || need+=(chromium) # the dashboard's browser test
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need+=(iproute2) # netnstest's namespaces
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if [ "${1:-}" = "--check" ]; then
        echo "missing test peers: ${need[*]}; install them with 'sudo make deps' (or run make test as root)" >&2
        exit 1
    fi
    sudo="sudo"
fi
echo "installing test peers from Debian: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
# The packages start system services we don't want: tests run their own instances.
for svc in tinyproxy squid redis-server; do
    $sudo service "$svc" stop >/dev/null 2>&1 || true
done
