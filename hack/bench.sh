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
    echo "## Lease API under a garbage-token flood (issue 20)"
    echo
    echo "\`LEASE_AUTH_FLOOD_REPORT=FILE go test -run '^TestLeaseAuthFlood\$' ./pkg/operator\`: the operator"
    echo "binary with --lease-auth=kubernetes against a real kube-apiserver. For 6 s an authorised client"
    echo "(its token cached) acquires and releases, a new Proxy is created and taken to Ready by the"
    echo "controller, and a client with a fresh ServiceAccount token makes its first call; in the flood row"
    echo "eight goroutines from 127.0.0.2 send acquires with unique garbage tokens meanwhile, beside the same"
    echo "calls without the flood. TokenReviews are counted at the API server; the flood and the operator"
    echo "share the machine's cores, which is what slows the authorised calls."
    echo
    flood_report=$(mktemp)
    LEASE_AUTH_FLOOD_REPORT="$flood_report" go test -count=1 -run '^TestLeaseAuthFlood$' ./pkg/operator >/dev/null
    cat "$flood_report"
    rm -f "$flood_report"
    echo
    echo "## Controller at scale (issue 9)"
    echo
    echo "\`go run ./pkg/testsuites/bench/operator\`: the operator binary against a real kube-apiserver and etcd"
    echo "(pkg/testing/testenv), with 1,000 and 10,000 External proxies pointing at a loopback fleet (a child"
    echo "process) that its health engine takes from Pending to Ready: time to all Ready beside the"
    echo "time the bench's own client takes to create them, API writes per proxy counted at the API"
    echo "server beside the two the design needs, and the operator's CPU and memory in steady state"
    echo "(half the proxies leased) beside the idle operator, kube-apiserver and etcd; plus the"
    echo "1,000 fleet at client-go's default QPS/burst (5/10) beside ours (100/200); the steady window at 10,000"
    echo "is the long one (status writes per proxy per hour), and the cost-growth table gives each size's RSS and CPU"
    echo "per proxy. About 30 minutes; a 50,000 row is \`-sizes 1000,10000,50000 -timeout 30m\` (about 45 minutes more)."
    echo
    go run ./pkg/testsuites/bench/operator -steady-at 10000
    echo
    echo "## Gateway (issue 14)"
    echo
    echo "\`go run ./pkg/testsuites/bench/gateway\`: 64 concurrent clients on loopback, straight to cmd/forward-proxy"
    echo "(basic auth) versus through cmd/proxy-operator's gateway (\`--gateway-addr\`, rotating mode: a lease acquired"
    echo "and released per tunnel) to the same forward-proxy, registered as an External Proxy on a real kube-apiserver."
    echo "Each party is a process of its own, with its CPU time counted (/proc/PID/stat, getrusage), in two placements:"
    echo "every process on every core, and the gateway pinned to a core of its own (taskset) with the clients and the"
    echo "forward-proxy on the other in both paths (decision 130). Three rounds per measurement, alternating which"
    echo "path goes first; medians."
    echo
    go run ./pkg/testsuites/bench/gateway
    echo
    echo "## Secret rotation: ProxyPool beside standalone Proxies (issue 13)"
    echo
    echo "\`go run ./pkg/testsuites/bench/pool\`: the operator binary on a real kube-apiserver and etcd, local-provider"
    echo "forward-proxy processes probed through themselves every second. Six ProxyPool members"
    echo "sharing a cloud-init Secret (maxSurge 1, maxUnavailable 1) beside six standalone Proxies"
    echo "sharing another, both Secrets rotated at the same moment: the fewest Ready proxies seen"
    echo "(sampled every 100 ms) and the time until all six are Ready on the new content."
    echo
    go run ./pkg/testsuites/bench/pool
    echo
    echo "## Autoscaling: scale from zero, and proxy-hours (issue 15)"
    echo
    echo "\`go run ./pkg/testsuites/bench/autoscale\`: the operator binary on a real kube-apiserver and etcd with the"
    echo "local provider; a ProxyPool with spec.autoscaling (minReplicas 0) at zero members takes one acquire with"
    echo "wait 60s, five rounds (back to zero in between): the time to its 201 beside, in the same run, the local"
    echo "provider alone (Create to a Running instance, called directly) and the probe interval (1 s): a member is"
    echo "Ready only after its first probe, which lands within one interval of its start. Then a simulation, not a"
    echo "measurement: a deterministic day of bursty crawl jobs run through pool.Autoscale (the operator's own"
    echo "decision function) every 5 s, members Ready 45 s after creation, beside a pool fixed at the trace's peak."
    echo
    go run ./pkg/testsuites/bench/autoscale
} >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out"
