#!/usr/bin/env bash
# Installs the Debian packages that tests use as real peers: tinyproxy and
# squid (proxies nobody here wrote) and redis-server (the lease benchmark's
# reference). Idempotent: does nothing when they are all present.
set -o errexit -o nounset -o pipefail

need=()
command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ] || need+=(tinyproxy)
[ -x /usr/sbin/squid ] || need+=(squid)
command -v redis-server >/dev/null || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
# The packages start system services we don't want: tests run their own instances.
for svc in tinyproxy squid redis-server; do
    $sudo service "$svc" stop >/dev/null 2>&1 || true
done
