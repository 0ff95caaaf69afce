#!/usr/bin/env bash
# Runs every benchmark and writes docs/benchmarks.md: each figure beside its
# reference measured in the same run, with the machine and the date.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=docs/benchmarks.md
# The last commit with the hand-written speed-ups that issue 34 folded back:
# the lease API bench runs it beside the current code (docs/decisions/0171-lease-path-plain-again.md).
fold_ab_ref=${FOLD_AB_REF:-4607021}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# realnode_report: make cluster from built binaries, timed, then the
# real-node suite writing its table. Needs root, as make cluster does.
realnode_report() {
    make -s cluster-tools cluster-images >&2
    go build -o bin/cluster ./hack/cluster
    bin/cluster down >&2
    local began=$SECONDS report
    report=$(mktemp)
    bin/cluster up >&2
    echo "make cluster, binaries built, to Node Ready: $((SECONDS - began)) s"
    echo
    REALNODE_REPORT="$report" hack/e2e.sh >&2 || echo "(the suite failed: see make e2e)"
    bin/cluster down >&2
    cat "$report"
    rm -f "$report"
}

{
    echo "# Benchmarks"
    echo
    echo "Written by \`make bench\` (hack/bench.sh) on $(date -u +%Y-%m-%d). Every figure stands"
    echo "beside a reference measured in the same run on the same machine; these machines are"
    echo "shared, so compare ratios, not absolute numbers across runs. Runs made with other flags (50,000 proxies)"
    echo "and the before/after figures of changes are kept in docs/benchmarks-runs.md, which this never rewrites."
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3-4), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
    echo
    echo "## Health engine (issue 5)"
    echo
    echo "\`go run ./pkg/testsuites/bench/health\`: the engine probing N loopback proxies (served by a child"
    echo "process) on a 10 s interval (three times the default load), against the schedule"
    echo "(expected probes/s = N / interval), beside a bare loop running the same probe function"
    echo "at the same concurrency as fast as it goes (the limit), and the same loop paced to the engine's rate (the same"
    echo "load without the engine); both loops run under a context ended by a cancel, as the engine's is ([decision 164](decisions/0164-engine-own-work-probe-measured-alone.md))."
    echo "They alternate, three rounds per size, each round a fresh engine;"
    echo "the figures are summed over the rounds, and each round's ratio is shown ([decision 157](decisions/0157-scheduling-pass-looks-again-only-at.md)). The engine's CPU, garbage"
    echo "and probes are counted over its steady window, from one interval after its start ([decision 169](decisions/0169-health-bench-divides-engine-steady-window.md)). Target (issue 16):"
    echo "the engine's CPU per probe at most 1.1x the bare loop's at 10,000 proxies. The last two columns are the heap"
    echo "bytes the process allocated per probe, the garbage its GC then collects ([decision 167](decisions/0167-probe-leaves-third-less-garbage-scheduling.md))."
    echo
    go run ./pkg/testsuites/bench/health
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkEngineOwnWork\$' -benchtime 3s ./pkg/health\`: what the engine adds to a"
    echo "probe, without the probe: a scheduling pass over 10,000 proxies a second after the last, and the recording of"
    echo "the probes it dispatched ([decision 164](decisions/0164-engine-own-work-probe-measured-alone.md)). ns/probe beside the CPU per probe above is the engine's own share."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkEngineOwnWork$' -benchtime 3s ./pkg/health | grep -E '^Benchmark'
    echo '```'
    echo
    echo "### The prober's speed-ups folded back: A/B (issue 34)"
    echo
    cat <<'HEALTHAB'
Measured once, on 2026-12-04, not rerun by `make bench`: the health bench built at 4607021 (the probe's request,
header map, reader limit and CONNECT URL pooled; an IP dialled without the resolver) and after the fold-back (a
plain request per probe, the ordinary dialer), alternating, `-sizes 10000 -durations 30s -bare 10s -rounds 1`
three times each ([0180](decisions/0180-plain-probe-request-and-dial.md); every round in docs/benchmarks-runs.md).

| build | engine CPU per probe (median of 3) | rounds | allocated per probe |
|---|---:|---|---:|
| pooled request, IP dial (4607021) | 99 µs | 107, 99, 94 | 2,980 B |
| plain (kept) | 96 µs | 96, 96, 94 | 3,909 B |

The speed-ups saved nothing measurable (the 10% bar is ~10 µs here), so they are folded back. The probe's own
HTTP/1.1 ([0161](decisions/0161-health-probe-speaks-http-1-1.md)) stays: its A/B saved ~15%.
HEALTHAB
    echo
    echo "## Lease API (issues 6, 16)"
    echo
    echo "### The store in-process"
    echo
    echo "\`go run ./pkg/testsuites/bench/store\`: acquire+release pairs on a store of 1,000 proxies, the same loop body"
    echo "in three placements that alternate round by round: one goroutine on one core (GOMAXPROCS=1; target: at least"
    echo "1,000,000 pairs/s), 64 goroutines on one core (a lock convoy would show here first), and 64 goroutines on every"
    echo "core (target: no worse than one goroutine on one core). Every 64th pair is timed for the p99; pairs per"
    echo "CPU-second divide by the process's own CPU time, which other tenants of a shared machine do not inflate;"
    echo "allocations per pair are the runtime's count for the whole process ([decision 159](decisions/0159-lease-ids-version-3-signed-aes.md))."
    echo
    echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), with$(grep -m1 '^flags' /proc/cpuinfo | grep -qw sha_ni || echo "out") SHA extensions (HMAC-SHA256 lease IDs were ~0.4 µs a pair dearer without them; [decision 159](decisions/0159-lease-ids-version-3-signed-aes.md))."
    echo
    go run ./pkg/testsuites/bench/store
    echo
    echo "### The handlers alone"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkHandlerPair\$|BenchmarkStoreOps\$' -benchtime 3s -cpu 1 ./pkg/lease/server ./pkg/lease/store\`: one"
    echo "acquire+release through Server.Handler with requests built by hand (no sockets, no net/http parsing), beside"
    echo "the store's own pair: what the lease API's handlers add to a pair. 7 of its allocs/op are the benchmark's"
    echo "own requests ([decision 153](decisions/0153-lease-api-decodes-request-without-maps.md))."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkHandlerPair$|BenchmarkStoreOps$' -benchtime 3s -cpu 1 ./pkg/lease/server ./pkg/lease/store | grep -E '^Benchmark'
    echo '```'
    echo
    echo "### Over HTTP, in-process"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkLeaseAPI/(http-lease|http-lease-domain|http-lease-policy|http-trivial|redis)\$' -benchtime 3s ./pkg/lease/server\`:"
    echo "the lease API's handler on loopback in the benchmark's process, 1,000 proxies, 64 concurrent clients, beside"
    echo "(a) a trivial net/http handler in the lease API's server settings hit by the same client (the HTTP limit) and (b) Debian's"
    echo "redis-server doing SET NX PX + DEL. http-lease-domain and http-lease-policy acquire with a domain, the second under a"
    echo "CrawlPolicy rule for it that is charged but never binds (issue 40: at least 0.9x the first's pairs/s)."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkLeaseAPI/(http-lease|http-lease-domain|http-lease-policy|http-trivial|redis)$' -benchtime 3s ./pkg/lease/server | grep -E '^Benchmark'
    echo '```'
    echo
    echo "### Memory per 10,000 domains"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkStoreMemoryPer10kDomains' -benchtime 3x ./pkg/lease/store\`: the live heap a"
    echo "store adds for 10,000 domains with a 1 KiB session state each (states), or a CrawlPolicy default-rule budget each"
    echo "(budgets): both are capped (--lease-max-state-bytes, --lease-max-domain-budgets)."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkStoreMemoryPer10kDomains' -benchtime 3x ./pkg/lease/store | grep -E '^Benchmark'
    echo '```'
    echo
    echo "### Tenants at the caps (issue 48)"
    echo
    echo "\`go run ./pkg/testsuites/bench/tenants\`: 10 identities in 2 namespaces, each trying 100,000 distinct domains"
    echo "against the store in-process on a fake clock (1 ms an attempt): every attempt a new CrawlPolicy default-rule"
    echo "budget (pinned 2 minutes by minIntervalPerProxy) and, when granted, a 16-byte session state and a try to plant"
    echo "one for another domain; probes in both namespaces and a quiet third check that their limits bind throughout"
    echo "([decision 214](decisions/0214-adversarial-run-on-store.md)). Bound on the heap's growth: 1.5x"
    echo "--lease-max-state-bytes + 1 KiB per --lease-max-domain-budgets + 16 MiB."
    echo
    go run ./pkg/testsuites/bench/tenants
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkNewDomainAcquire' ./pkg/lease/store\` and \`-bench 'BenchmarkSessionStateMemory' -benchtime 3x\`: a"
    echo "new-domain acquire+release at the default cap, 50,000 budgets pinned behind 50,000 idle (full) or few (empty)"
    echo "([decision 212](decisions/0212-domain-budgets-shared-per-namespace.md)); and the heap one session state takes beside"
    echo "what --lease-max-state-bytes charges it ([decision 210](decisions/0210-session-state-cap-counts-entries.md))."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkNewDomainAcquire' ./pkg/lease/store | grep -E '^Benchmark'
    go test -run '^$' -bench 'BenchmarkSessionStateMemory' -benchtime 3x ./pkg/lease/store | grep -E '^Benchmark'
    echo '```'
    echo
    echo "### Over HTTP, on the operator binary"
    echo
    echo "\`go run ./pkg/testsuites/bench/leaseapi\`: cmd/proxy-operator (no -race) with --lease-auth=none on a real"
    echo "kube-apiserver and etcd, leading 1,000 External proxies (MaxLeases 1) that its health engine took to Ready;"
    echo "64 clients (pkg/lease/client) doing acquire+release pairs, beside the same client against a trivial net/http"
    echo "handler in a process of its own, in the lease API's own net/http server settings (server.NewHTTPServer: the"
    echo "same timeouts, so the same per-request deadlines; [decision 155](decisions/0155-lease-api-bench-trivial-handler-runs.md)), that answers the operator's own grant body"
    echo "and Location, and 204 to the release. 11 alternating rounds, medians; CPU/pair is the server process's."
    echo "Targets (issue 16): pairs/s at least 0.95x the trivial handler's, p99 at most 1.2x."
    echo "The same rounds also run the operator built at $fold_ab_ref (FOLD_AB_REF), the last commit with the lease"
    echo "path's hand-written speed-ups, for issue 34's A/B: a speed-up stays only if it saves at least 10% of the"
    echo "operator's CPU per pair here ([0171](decisions/0171-lease-path-plain-again.md); the A/B tables below)."
    echo "The same rounds also run three replicas with --lease-replication=raft (issue 62), each with a Pod object of its"
    echo "own and its peer port on loopback, leading a namespace of the same 1,000 proxies, client i calling replica i mod 3"
    echo "as the leases Service spreads them: pairs/s against the one process (--lease-replication=none), target at least 0.5x."
    echo "Then each replica's RSS after growing that fleet to 10,000 proxies and making 100,000 cool-downs through the"
    echo "replicas (an acquire for a site of its own, released banned); \`-quick\` runs it all small in about two minutes."
    echo
    go run ./pkg/testsuites/bench/leaseapi -baseline-ref "$fold_ab_ref"
    echo
    cat <<'LEASEAB'
What was kept and why (issue 34, [0171](decisions/0171-lease-path-plain-again.md)): each of the lease path's
speed-ups, put back alone, saved under 10% of the operator's CPU per pair (routing none, the JSON encoder 4%,
the decoder 7%, lease IDs and the store's free lists together 9%; docs/benchmarks-runs.md, "Issue 34's
fold-back"), so all stay folded: encoding/json both ways, ServeMux patterns, HMAC-SHA256 lease IDs, a store
without free lists. Together they cost what the A/B above shows. A plainer decoder (the body read whole,
`json.Valid`, one walk) saved 3% and was not kept either (docs/benchmarks-runs.md, "The lease path again").
LEASEAB
    echo
    cat <<'STORY'
#### Where the time went (the profile's story)

Profiles of the running binary (`--profiling`, `go run ./pkg/testsuites/bench/leaseapi -cpuprofile FILE`,
then `go tool pprof -peek 'Server..(acquire|release)$'`), 2026-12-01, 64 clients:

- **Before** (main at 6fcf667): the lease handlers were 36% of the operator's CPU under load (acquire 24%,
  release 12%); net/http itself (reading requests, writing responses: syscalls) most of the rest. Inside
  acquire: the store's Acquire 35% (selection, signing the lease ID with HMAC-SHA256 under the lock), decoding
  the body with encoding/json's tokenizer 22%, encoding the answer with encoding/json's reflection 20%,
  the Secret credentials lookup 8%. Inside release: the lease ID was decoded and its HMAC checked twice,
  once to authorize (its namespace) and once to release (45% and 40% of release). The store allocated 12
  times per pair (908 B): the ID's buffers and MAC sums, one string per decoded field, the lease, two list
  elements per release; every allocation is GC work on a 2-core machine shared with the clients.
- **After**: the handlers are 21% of the operator's CPU (acquire 14%, release 3%, the rest the wrapper's
  routing and header checks), GC 7%. The operator still spends ~100 µs of CPU per pair against the trivial
  handler's ~65 µs: that difference is about the handlers' share plus GC, spread thin (the store's Acquire and
  the answer's encoding ~5% each, the selection walking past the 64 held proxies at the front of the order,
  which [decision 113](decisions/0113-selection-orders-hold-only-proxies-acquire.md) then removed, net/http's per-request deadlines that the API's timeouts set). The store
  allocates once per pair (the ID string, ~118 B): decisions [110](decisions/0110-lease-store-pair-costs-one-allocation.md) (store), [111](decisions/0111-lease-api-hot-answers-written-hand.md) (HTTP), [112](decisions/0112-lease-metrics-look-up-their-label.md) (metrics) and
  [113](decisions/0113-selection-orders-hold-only-proxies-acquire.md) (selection).
- **After decisions [152](decisions/0152-acquires-releases-routed-hand-mux-routes.md)-[154](decisions/0154-kept-lease-id-compared-plainly-up.md)** (2026-12-02, `-peek 'Server..(acquire|release)$'` on the binary): the handlers
  went from 31% to 21% of the operator's CPU and GC from 7.8% to 4.9%. What was cut: the wrapper's three passes
  over the path (the clean-path check, asking the mux whether a route exists, the mux's own match: 7%),
  a map per request for the body's members and one for the query, the known-parameter list joined on every
  call, apimachinery's regexp for the namespace (2% on its own), two allocations for the client address, a
  clock read and an escaping error target on every grant. What is left, each 1-5%: the store (signing the ID),
  writing the answer (net/http's WriteHeader and our JSON), the proxy lister's lookup for credentials, two
  peeks at the lease key per release (authorize, then release), the Location header's string. net/http's
  own per-request work (syscalls, header parsing, the deadlines the API's timeouts set) is the rest, and the
  reference now pays the same ([decision 155](decisions/0155-lease-api-bench-trivial-handler-runs.md)).
- **The store's one-core target** (1,000,000 pairs/s): [decision 156](decisions/0156-store-keeps-hmac-sha256-lease-ids.md) measured a throwaway build whose lease ID
  was an unsigned stub at 771k-1,108k pairs/s against 523k-609k with the signed ID, on the Xeon VM of
  2026-12-02: signing (HMAC-SHA256, base64, the ID's string) was about 0.7 µs of a pair there.
- **After decisions [159](decisions/0159-lease-ids-version-3-signed-aes.md)-[162](decisions/0162-scheduling-pass-finds-proxy-state-cached.md)** (2026-12-02, an AMD EPYC VM with SHA and AES instructions): IDs are version 3,
  signed with AES-CMAC (six AES blocks instead of three SHA-256 blocks) after the store's lock is released and
  published in a box per grant, so a release still compares instead of checking a MAC; the clock is read
  before locking. One core: 822 → 796 ns a pair here (min of 8 interleaved runs each), and 1,207 → 821 ns with
  the SHA extensions switched off (GODEBUG=cpu.sha=off), which is the Xeon case. A grant reads its
  credentials Secret by the name the store keeps, without the Proxy lister (2.3% of the operator's CPU under
  the lease bench went to that lookup); the handlers went from 17.7% to 14.2% of the operator's CPU.
- Not costs here: authentication (NoAuth; TokenReview answers are cached, issue 20), logging (V(4) grant
  logs are now checked before their arguments are built), metrics label lookups (children cached). Lock
  contention: on the EPYC of 2026-12-01 the 64-goroutine p99 stayed at a few µs; on the Xeon VM of 2026-12-02
  it is ~5 ms at -cpu 2, for the code before this session's changes as for the code after (measured side by
  side), so it is how this VM schedules 64 runnable goroutines on 2 vCPUs, not the store. On two cores 64
  goroutines did fewer pairs/s than one goroutine on one core (0.75-0.86×): signing outside the lock
  ([decision 159](decisions/0159-lease-ids-version-3-signed-aes.md)) took the p99 from milliseconds to below two, and the profile of the two-core placement alone (`-only 3
  -cpuprofile F`) then put 8% in `selectedBefore`: a release read its clock before waiting for the lock, so
  it sorted before the releases the other core made meanwhile, and its insert into the selection order walked
  back past each of them, a cache miss apiece. Stamped no earlier than the release before it ([decision 163](decisions/0163-release-stamped-no-earlier-than-release.md)),
  the insert stops at the back: two cores 678-777k → 829-905k pairs/s in an old/new A/B, 0.88-1.01× → 0.98-1.02×
  one core, p99 0.6 ms. What is left is the lock's handoff between cores; a store whose data stays on one core
  (sharded or combining) is what the rest would take.
- **The VM's speed moves from run to run** (on 2026-12-02 the HTTP references did 11,000-17,800 pairs/s in the
  morning and 6,400-9,800 in the afternoon; one core of the store 0.82-1.26M pairs/s in the morning, 0.5-0.9M
  later), so the absolute figures of the tables above are the day's, not the code's; the ratios, measured side
  by side in one run, are what compare.
STORY
    echo
    echo "### Snapshots of the replicated store (issue 62)"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkSnapshotAtDefaultCaps' -benchtime 5x ./pkg/lease/store\`: the Raft snapshot"
    echo "of a store of 10,000 proxies at the default caps, 100,000 cool-downs and 64 MiB of session state (state-MiB, as"
    echo "--lease-max-state-bytes charges it): its size, the time the store's lock is held for it (the encoding, which"
    echo "Snapshot does under the lock into memory; no grant is made meanwhile), the write that follows outside the"
    echo "lock, and a Restore into a fresh store (decoded outside the lock, swapped in under it)."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkSnapshotAtDefaultCaps' -benchtime 5x ./pkg/lease/store | grep -E '^Benchmark'
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
    echo "per proxy. At 10,000 the operator is measured again over a minute with no dashboard open and a minute with"
    echo "20 open dashboard streams (/ui/api/stream, each reading every update; issue 55), side by side."
    echo "Beside each size, the same number of members of one pool on 4 shared instances (\`-instances 4\`,"
    echo "\`spec.membersPerInstance\`, each member a session; issue 54, [docs/ipv6.md](ipv6.md)): Proxy objects, convergence,"
    echo "lease acquires/s and the operator's memory, side by side."
    echo "About 32 minutes without the sessions runs; a 50,000 row is \`-sizes 1000,10000,50000 -timeout 30m\` (about 45 minutes more)."
    echo
    go run ./pkg/testsuites/bench/operator -steady-at 10000 -instances 4
    echo
    echo "## Gateway (issues 14, 36)"
    echo
    echo "\`go run ./pkg/testsuites/bench/gateway\`: 64 concurrent clients on loopback, straight to cmd/forward-proxy"
    echo "(basic auth) versus through the gateway tier (\`proxy-operator gateway\` replicas calling the operator's lease API over"
    echo "HTTP, rotating mode: a lease acquired and released per tunnel; [record 0188](decisions/0188-gateway-tier.md)) to the"
    echo "same forward-proxy, registered as an External Proxy on a real kube-apiserver; then one replica against two."
    echo "Each party is a process of its own, with its CPU time counted (/proc/PID/stat, getrusage), in two placements:"
    echo "every process on every core, and the gateway pinned to a core of its own (taskset) with the clients and the"
    echo "forward-proxy on the other in both paths ([decision 130](decisions/0130-gateway-benchmark-runs-real-binaries-separate.md)). Three rounds per measurement, alternating which"
    echo "path goes first; medians."
    echo
    go run ./pkg/testsuites/bench/gateway
    echo
    echo "### Lease credentials: what the check costs the forward-proxy (issue 63)"
    echo
    echo "\`go run ./pkg/testsuites/bench/leasekey\`: cmd/forward-proxy built at the commit before lease keys (before) and from"
    echo "this tree with a lease key (static: its static credentials; leased: each client a lease's signed credentials, verified,"
    echo "tracked and its tunnel attached), on loopback, 32 clients each opening a fresh connection, a CONNECT and its 200 to a"
    echo "target that closes at once; the sides take turns for 7 rounds of 4 s. Target: leased at least 0.9x before's median"
    echo "CONNECT/s ([record 0404](decisions/0404-connect-rate-measured-before-and-after.md))."
    echo
    go run ./pkg/testsuites/bench/leasekey
    echo
    echo "### Inspected HTTPS against tunnelled (issue 50)"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkInspectedAgainstTunnelled' -benchtime 3s -count 5 ./pkg/gateway\`: one client,"
    echo "each HTTPS GET on a new connection (a new CONNECT and a rotating lease) through the same in-process gateway and"
    echo "forward-proxy to a loopback TLS site: tunnelled (the caller names no namespace: one TLS handshake, crawler to site)"
    echo "beside inspected (two: crawler to the gateway's minted leaf, gateway to the site). Target: inspected at least 0.5x"
    echo "tunnelled's requests per second ([record 0199](decisions/0199-inspection-opt-in-per-namespace.md))."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkInspectedAgainstTunnelled' -benchtime 3s -count 5 ./pkg/gateway | grep -E '^Benchmark'
    echo '```'
    echo
    echo "## Dashboard (issue 55)"
    echo
    echo "\`go test -run '^\$' -bench 'BenchmarkFleetViewLoad|BenchmarkStatusChangeVisible' -benchtime 10x ./pkg/testsuites/dashboard\`:"
    echo "pkg/dashboard served in the benchmark's process over a synthetic fleet of 10,000 proxies in 50 pools (1,000"
    echo "leases), Debian's headless chromium driven by chromedp. FleetViewLoad: navigation to the 50 pool rows on screen"
    echo "(ms-to-fleet, the page's own clock; target under 2,000 ms). StatusChangeVisible: a change poked into the hub"
    echo "to the changed row on screen (ns/op; target under 1 s; the hub's debounce is 200 ms of it)."
    echo "\`-bench 'BenchmarkMemoryWith20Dashboards' -benchtime 1x\`: the process's heap in use after a GC with no viewer,"
    echo "then with 20 open streams that each took the first view and one update (the dashboard's share of the operator's"
    echo "memory; the hub keeps one view for all). \`go test -run '^\$' -bench 'BenchmarkRebuild10000' ./pkg/dashboard\`:"
    echo "one rebuild of that view and its encoding, which the hub does once per burst of changes and once a second."
    echo
    echo '```text'
    go test -run '^$' -bench 'BenchmarkFleetViewLoad|BenchmarkStatusChangeVisible' -benchtime 10x ./pkg/testsuites/dashboard | grep -E '^Benchmark'
    go test -run '^$' -bench 'BenchmarkMemoryWith20Dashboards' -benchtime 1x ./pkg/testsuites/dashboard | grep -E '^Benchmark'
    go test -run '^$' -bench 'BenchmarkRebuild10000' ./pkg/dashboard | grep -E '^Benchmark'
    echo '```'
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
    echo
    echo "## Real node (issue 35)"
    echo
    echo "\`hack/e2e.sh\` with REALNODE_REPORT: make cluster's real node (kubelet, containerd, runc, bridge CNI,"
    echo "kube-proxy, CoreDNS, kube-router) brought up from built binaries (the warm figure; building them is in docs/operations.md),"
    echo "then the real-node suite, whose steps time themselves; idle is the node's components with nothing"
    echo "installed, before the suite. Single runs: the suite's own bounds are generous, these are what one run took."
    echo "Since issue 62 the chart runs three replicas with the lease store replicated by Raft: after a leader's"
    echo "end, \"first new grant\" and \"first renewal\" are the lease API's (through the leases Service), and"
    echo "\"new leader of the controllers\" is the Kubernetes Lease's, which only reconciling waits for."
    echo
    realnode_report
} >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out"
