#!/usr/bin/env bash
# make e2e: the real-node suite (pkg/testsuites/realnode) on make cluster's
# node. Brings the node up unless one is already up, runs the suite, and takes
# the node down again if it brought it up, also when the suite fails. Runs as
# root (the node mounts, creates interfaces and iptables rules).
#
#   REALNODE_REPORT=file   also write the suite's timings as a markdown table
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "make e2e runs as root: the node it starts mounts, creates network interfaces and iptables rules" >&2
    exit 1
fi
go build -o bin/cluster ./hack/cluster
if [ -f .cluster/kubeconfig ]; then
    echo "e2e: using the node that is already up (make cluster-down removes it)"
else
    trap 'hack/step.sh "make e2e: node down" bin/cluster down' EXIT
fi
hack/step.sh "make e2e: node up" bin/cluster up
# GOTEST: .ci/run's hack/timetable go-test, which times the suite as a package.
hack/step.sh "make e2e: the suite" ${GOTEST:-go test} -tags realnode -count=1 -v -timeout 20m ./pkg/testsuites/realnode/
