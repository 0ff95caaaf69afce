#!/usr/bin/env bash
# Runs every benchmark and writes docs/benchmarks.md: each figure beside its
# reference measured in the same run, with the machine and the date.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=docs/benchmarks.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

{
    echo "# Benchmarks"
    echo
    echo "Written by \`make bench\` (hack/bench.sh) on $(date -u +%Y-%m-%d). Every figure stands"
    echo "beside a reference measured in the same run on the same machine; these machines are"
    echo "shared, so compare ratios, not absolute numbers across runs."
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3-4), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
    echo
    echo "## Health engine (issue 5)"
    echo
    echo "\`go run ./pkg/testsuites/bench/health\`: the engine probing N loopback proxies (served by a child"
    echo "process) on a 10 s interval (three times the default load), against the schedule"
    echo "(expected probes/s = N / interval), beside a bare loop running the same probe function"
    echo "at the same concurrency (the limit)."
    echo
    go run ./pkg/testsuites/bench/health
    echo
    echo "## Lease API (issue 6)"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkLeaseAPI|BenchmarkStoreOps' -benchtime 3s ./pkg/lease\`:"
    echo "acquire+release pairs over HTTP on loopback, 1,000 proxies, 64 concurrent clients, beside"
    echo "(a) a trivial net/http handler hit by the same client (the HTTP limit) and (b) Debian's"
    echo "redis-server doing SET NX PX + DEL; plus the store in-process."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkLeaseAPI|BenchmarkStoreOps' -benchtime 3s ./pkg/lease | grep -E '^(Benchmark|goos|goarch|cpu)'
    echo '```'
    echo
    echo "## Controller at scale (issue 9)"
    echo
    echo "\`go run ./pkg/testsuites/bench/operator\`: the operator binary against a real kube-apiserver and etcd"
    echo "(pkg/testing/testenv), with 1,000 and 10,000 External proxies pointing at a loopback fleet (a child"
    echo "process) that its health engine takes from Pending to Ready: time to all Ready beside the"
    echo "time the bench's own client takes to create them, API writes per proxy counted at the API"
    echo "server beside the two the design needs, and the operator's CPU and memory in steady state"
    echo "(half the proxies leased) beside the idle operator, kube-apiserver and etcd; plus the"
    echo "1,000 fleet at client-go's default QPS/burst (5/10) beside ours (100/200). About 30 minutes."
    echo
    go run ./pkg/testsuites/bench/operator
} >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out"
