# proxy-operator: `make run` starts the operator on an embedded API server,
# `make test` runs every test. See README.md.

GO        ?= go
GOFLAGS   ?=
BIN       := $(CURDIR)/bin
GO_PKGS   := ./...
# GOTEST runs go test; .ci/run sets it to hack/timetable's go-test, which
# records every package's wall and CPU time for its time table.
GOTEST    ?= $(GO) test
# Integration tests start etcd + kube-apiserver per package; 2 cores want few at once.
TEST_P    ?= 2
TEST_TIMEOUT ?= 25m

.PHONY: all build run unit test chaos fuzz bench generate verify verify-scripts verify-decisions verify-docs testenv testtools deps testpeers fmt vet clean image cluster cluster-down cluster-tools cluster-images e2e

all: build

## build: compile every package, and the binaries into bin/
build:
	$(GO) build $(GO_PKGS)
	$(GO) build -o $(BIN)/ ./cmd/proxy-operator ./cmd/forward-proxy ./hack/local-up

# step runs a command and says when it started and how long it took, and
# records it for .ci/run's time table (hack/step.sh):
# $(call step,what it does,command). make run's progress on a first run.
define step
	@hack/step.sh "make $@: $(1)" $(2)
endef

## run: the operator on an embedded API server (or on $$KUBECONFIG's cluster); ARGS= passes flags. Builds only what it runs, step by step
run:
	$(call step,1/3 build bin/local-up and bin/forward-proxy,$(GO) build -o $(BIN)/ ./hack/local-up ./cmd/forward-proxy)
	$(call step,2/3 build the pinned kube-apiserver etcd and kubectl (make testenv),hack/tools/build.sh)
	@echo "make $@: 3/3 bin/local-up $(ARGS) (Ctrl-C stops it and everything it started)"
	$(BIN)/local-up $(ARGS)

## unit: the fast unit loop, go test -short ./...: no kube-apiserver, etcd, Debian peer or other process; integration tests skip and say what they need
unit:
	$(GO) test -short $(GO_PKGS)

## test: unit and integration tests with the race detector, then the real-node suite (installs missing Debian peers when root)
test: testenv testtools testpeers
	$(call step,go test -race ./...,$(GOTEST) -race -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(GO_PKGS))
	$(call step,go test hack/image,env GOWORK=off $(GOTEST) -C hack/image -count=1 -timeout $(TEST_TIMEOUT) ./...)  # -count=1: it builds the operator, which the test cache does not track
	$(MAKE) e2e

## e2e: the real-node suite: make cluster's node, the operator installed by its chart, then the node removed (root; ~5 min)
e2e: cluster-tools cluster-images testpeers
	hack/e2e.sh

## image: OCI image layouts of proxy-operator and forward-proxy in .local/images (no Docker; see docs/operations.md)
image:
	GOWORK=off $(GO) run -C hack/image . --repo $(CURDIR) --out $(CURDIR)/.local/images

## cluster: a real one-node Kubernetes in the background (root); KUBECONFIG=.cluster/kubeconfig (docs/operations.md)
cluster: cluster-tools cluster-images
	$(GO) build -o $(BIN)/cluster ./hack/cluster
	$(BIN)/cluster up

## cluster-down: stop the node and remove everything it put on the machine
cluster-down:
	$(GO) build -o $(BIN)/cluster ./hack/cluster
	$(BIN)/cluster down

# cluster-tools: the node's pinned builds into bin/ (no-op when current), CoreDNS and kube-router included; helm installs the chart there.
cluster-tools: testenv testtools
	$(call step,kubelet kube-scheduler kube-controller-manager kube-proxy,hack/tools/build.sh node)
	$(call step,containerd,hack/tools/build-tool.sh containerd)
	$(call step,cni-plugins,hack/tools/build-tool.sh cni-plugins)
	$(call step,coredns,hack/tools/build-tool.sh coredns)
	$(call step,kube-router,hack/tools/build-tool.sh kube-router)

# cluster-images: make image's images, the node's sandbox and cluster DNS, the suite's target, probe and crawler, imported by make cluster.
CLUSTER_IMAGES := proxy-operator,forward-proxy,pause,echo,netcheck,coredns,crawler
cluster-images: cluster-tools
	$(call step,the images,env GOWORK=off $(GO) run -C hack/image . --repo $(CURDIR) --out $(CURDIR)/.local/cluster-images --images $(CLUSTER_IMAGES))

# The packages whose tests have a long variant (integration.Scaled): CI runs
# them at CI scale, make chaos at full size.
CHAOS_PKGS := ./pkg/testsuites/chaos/ ./pkg/testsuites/sharedendpoint/ ./pkg/inspection/

## chaos: the long variants (CHAOS=long): the failure suite's larger fleets and longer storms, the 5-minute shared-endpoint soak, the leaf cache under 100,000 hosts, the replicated store's fault history and idle soak; timed. Run it before a stop that touches what they cover
chaos: testenv testpeers
	$(call step,the long variants,env CHAOS=long $(GOTEST) -race -count=1 -timeout 60m -v $(CHAOS_PKGS))
	$(call step,the replicated store's long history,env CHAOS=long $(GOTEST) -race -count=1 -timeout 120m -v ./pkg/testsuites/replication/)

## fuzz: every go test -fuzz target for FUZZTIME (default 10s) each
fuzz:
	hack/fuzz.sh

## bench: every benchmark, side by side with its references; writes docs/benchmarks.md
bench: testenv testpeers
	hack/bench.sh

## generate: regenerate deepcopy, register, openapi, clients and the CRD
generate:
	hack/update-codegen.sh

## verify: generated code and CRD up to date, gofmt and go vet clean, docs name only flags, make targets and metrics that exist
verify: fmt vet verify-scripts verify-decisions verify-docs
	$(call step,generated code and CRD,hack/verify-codegen.sh)

# A backquote inside echo "..." runs its text as a command: make bench once
# ran every benchmark twice that way. Write \` for a literal one.
verify-scripts:
	@for f in hack/*.sh; do bash -n "$$f" || exit 1; done
	@if grep -nE '^[[:space:]]*echo "([^"\\]|\\.)*`' hack/*.sh; then \
		echo 'hack/*.sh: an unescaped backquote in echo "..." (above) runs a command; write \` for a literal one'; exit 1; fi

# Every decision record the tree points at exists; code names records by file.
verify-decisions:
	hack/verify-decisions.sh

# Every --flag, make target and proxy_operator_* metric that README.md and
# docs/*.md name exists, and README.md's Layout names every package under
# pkg/ and nothing that is gone (docs/docs_test.go, docs/layout_test.go).
verify-docs:
	$(call step,docs name what exists,$(GO) test -count=1 ./docs/)

fmt:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(call step,go vet ./...,$(GO) vet $(GO_PKGS))
	$(GO) vet -tags realnode ./pkg/testsuites/realnode/
	GOWORK=off $(GO) vet -C hack/image ./...

## testenv: build the pinned kube-apiserver, etcd and kubectl into bin/, what make run and the integration tests start (no-op when current)
testenv:
	$(call step,kube-apiserver etcd kubectl,hack/tools/build.sh)

## testtools: build the pinned helm and promtool into bin/, for the install artifacts' tests (make test; no-op when current)
testtools:
	$(call step,helm,hack/tools/build-tool.sh helm)
	$(call step,promtool,hack/tools/build-tool.sh promtool)

## deps: install the Debian packages the tests use as real peers (needs root)
deps:
	hack/install-deps.sh

# testpeers: what make test needs from Debian; installs it as root, otherwise names make deps.
testpeers:
	@hack/install-deps.sh --check

clean:
	rm -rf $(BIN) .local
