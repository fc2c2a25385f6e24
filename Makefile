# qgpu-scheduler: build, test, lint, bench. Every tool is pinned and installed
# through the Go module proxy; nothing else is needed but Go and gcc (cgo for go-nvml).
SHELL := bash
GO ?= go
BIN := bin
STATICCHECK_VERSION := v0.7.0
FUZZTIME ?= 10s
# Unit-test packages: everything but the apiserver-linking integration suite
# (test/e2enode's unit tests run here; make e2e-node runs the program).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v /test/integration)
BINARIES := qgpu-scheduler qgpu-agent kubectl-qgpu
TEST_BINARIES := qgpu-hollow-node qgpu-fake-plugin qgpu-agent-sim

# The version stamped into every binary and used as the image tag.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
# qgpu-scheduler also reports the Kubernetes release it is built from through
# k8s.io/component-base/version (metrics, /version of its server).
KUBE_VERSION := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)
VERSION_PKG := github.com/qgpu-scheduler/qgpu/internal/version
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitCommit=$(shell git rev-parse HEAD 2>/dev/null) \
	-X k8s.io/component-base/version.gitTreeState=$(if $(findstring dirty,$(VERSION)),dirty,clean)
# make images / make push: <IMAGE_REPO>/<name>:<VERSION>.
IMAGE_REPO ?= ghcr.io/qgpu-scheduler

.PHONY: all build kustomize version-check images push e2e-binaries e2e-node test unit race fuzz-short fuzz integration lint bench bench-throughput bench-perf replay clean integration-skew playground playground-up playground-down playground-colocation chaos manifests mutants mutants-list gpu-check

all: build

build: $(addprefix $(BIN)/,$(BINARIES) $(TEST_BINARIES))

$(BIN)/qgpu-scheduler: FORCE
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./cmd/qgpu-scheduler
$(BIN)/qgpu-agent: FORCE
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./cmd/qgpu-agent
$(BIN)/kubectl-qgpu: FORCE
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./cmd/kubectl-qgpu
# qgpu-agent with the simulated GPU activity, for the mixed nodes of the
# harness, the playground and make chaos (test/agentsim); never shipped.
$(BIN)/qgpu-agent-sim: FORCE
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ ./test/agentsim
$(BIN)/qgpu-hollow-node: FORCE
	$(GO) build -o $@ ./test/hollownode
$(BIN)/qgpu-fake-plugin: FORCE
	$(GO) build -o $@ ./test/harness/fakeplugin
$(BIN)/qgpu-playground: FORCE
	$(GO) build -o $@ ./test/playground
FORCE:

# The README's test command: vet, unit tests, -race on everything with locks,
# a short run of every fuzz target, the integration suite against a real
# kube-apiserver, etcd, kubelet device manager and the built binaries, and
# the real-node e2e (root).
test: build version-check
	$(GO) vet ./...
	$(MAKE) mutants-list
	$(GO) test -count=1 $(UNIT_PKGS)
	$(GO) -C hack/tools/images vet ./...
	$(GO) -C hack/tools/images test -count=1 ./...
	$(MAKE) race
	$(MAKE) fuzz-short
	$(MAKE) integration
	$(MAKE) e2e-node

# Every binary prints the version the build stamped (kubectl-qgpu also as
# `kubectl qgpu version`).
version-check: build
	@for b in $(BINARIES); do \
	  got=$$($(BIN)/$$b --version); want="$$b $(VERSION)"; \
	  if [ "$$got" != "$$want" ]; then echo "$$b --version: got '$$got', want '$$want'"; exit 1; fi; \
	done; \
	got=$$($(BIN)/kubectl-qgpu version); want="kubectl-qgpu $(VERSION)"; \
	if [ "$$got" != "$$want" ]; then echo "kubectl-qgpu version: got '$$got', want '$$want'"; exit 1; fi; \
	echo "version-check: $(BINARIES) print $(VERSION)"

# OCI images without a Docker engine (hack/tools/images, go-containerregistry):
# _output/images/<name>.tar for qgpu-scheduler, qgpu-agent, kubectl-qgpu and
# the e2e node's pause and probe images, tagged $(IMAGE_REPO)/<name>:$(VERSION).
E2E_BINARIES := qgpu-e2e-pause qgpu-e2e-probe qgpu-e2e-cni qgpu-e2e-node
$(BIN)/qgpu-e2e-pause: FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./test/e2enode/pause
$(BIN)/qgpu-e2e-probe: FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./test/e2enode/probe
$(BIN)/qgpu-e2e-cni: FORCE
	$(GO) build -o $@ ./test/e2enode/cni
$(BIN)/qgpu-e2e-node: FORCE
	$(GO) build -o $@ ./test/e2enode

images: build $(BIN)/qgpu-e2e-pause $(BIN)/qgpu-e2e-probe
	$(GO) -C hack/tools/images run . --bin-dir $(CURDIR)/$(BIN) --out $(CURDIR)/_output/images --repo $(IMAGE_REPO) --version $(VERSION)

# make push REGISTRY=registry.example.com/qgpu: the three shipped images,
# credentials from ~/.docker/config.json (go-containerregistry's default keychain).
push:
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=<registry/prefix>"; exit 1; }
	$(MAKE) build
	$(GO) -C hack/tools/images run . --bin-dir $(CURDIR)/$(BIN) --repo $(REGISTRY) --version $(VERSION) --push

e2e-binaries: $(addprefix $(BIN)/,$(E2E_BINARIES))

# The shipped manifests on real kubelets and containerd (docs/real-node.md).
# Root; installs runc and CNI plugins with apt-get, builds containerd,
# kubelet and kube-controller-manager into _output/bin, then make images.
# E2E_NODE_FLAGS=--device-list-strategy=envvar: the agents answer with variables, and the
# pods that set their own get them (the override checks fail); docs/real-node.md.
e2e-node:
	@VERSION=$(VERSION) IMAGE_REPO=$(IMAGE_REPO) GO=$(GO) E2E_NODE_FLAGS="$(E2E_NODE_FLAGS)" hack/e2e-node.sh

race:
	$(GO) test -count=1 -race ./plugins/... ./agent/...

# The real-card check (docs/real-card.md): _output/gpu-check, a payload a
# session lent a GPU carries to it (binaries built here, the CUDA programs'
# sources, HAMi-core's source from the tarball HAMI_CORE_TARBALL names, run.sh); prints
# the device call. DRY=1 also checks it here without a GPU (CI): run.sh
# --dry, the CUDA programs' host code. The Go half's unit tests run in go test.
gpu-check:
	@GO=$(GO) DRY=$(DRY) hack/gpu-check.sh

fuzz-short:
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

# Longer fuzzing on demand: make fuzz FUZZTIME=1m
fuzz:
	FUZZTIME=$(or $(filter-out 10s,$(FUZZTIME)),1m) hack/fuzz.sh

# The README's first command: a local cluster (real apiserver and etcd, the
# scheduler binary, hollow kubelets with the agent on fake cards), the
# examples applied, where every pod landed printed, all torn down again.
# PLAYGROUND_NODES="t4:2xT4,v100:2xV100:mixed" picks the nodes.
playground: build $(BIN)/qgpu-playground
	@$(BIN)/qgpu-playground

# The same, left running: admin kubeconfig at _output/playground/kubeconfig.
playground-up: build $(BIN)/qgpu-playground
	@hack/playground.sh up

playground-down:
	@hack/playground.sh down

# On the running playground: the online example busy, then idle; the
# offline pod beside it suspended and resumed (kubectl qgpu, metrics).
playground-colocation: $(BIN)/qgpu-playground
	@hack/playground.sh colocation

# kubectl-qgpu's krew release (hack/krew/qgpu.yaml): an archive per
# platform and the manifest with their sha256 in _output/krew. VERSION must
# be a tag (v<major>.<minor>.<patch>): make krew VERSION=v0.1.0.
KREW_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
.PHONY: krew
krew:
	@for p in $(KREW_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  echo "kubectl-qgpu $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o _output/krew/bin/$${os}_$${arch}/kubectl-qgpu ./cmd/kubectl-qgpu || exit 1; \
	done
	$(GO) run ./hack/krew --manifest hack/krew/qgpu.yaml --version $(VERSION) --bin-dir _output/krew/bin --out _output/krew

# Copies config/qgpu-scheduler.yaml to manifests/scheduler/config.yaml (the
# scheduler kustomization generates its hashed ConfigMap from it)
# (TestManifestsConfigFresh fails while it is stale).
manifests:
	hack/gen-manifests.sh

# TestSchedulerTracksReplayAtScale reads the openb trace from QGPU_TRACES:
# TRACES when given (a directory holding the trace's files), else
# _output/traces (make replay fetches it there); without the files it
# skips, and fails where QGPU_TRACES_REQUIRED=1 (.ci/run).
QGPU_TRACES ?= $(or $(TRACES),_output/traces)
integration: build kustomize
	QGPU_TRACES=$(abspath $(QGPU_TRACES)) KUSTOMIZE_BIN=$(abspath _output/bin/kustomize) $(GO) test -count=1 -timeout 30m ./test/integration/...

# The integration suite against every kube-apiserver this build supports
# (docs/install.md#supported-versions): go.mod's release in process, then
# the next minor, whose binary is pinned in hack/tools/kube-apiserver (the
# harness runs it instead of the in-process apiserver). One line per
# version: `integration against kube-apiserver vX.Y.Z: P passed, F failed`
# (hack/integration-skew.sh; logs in _output). Not part of make test (CI
# time). SKEW_TEST_FLAGS="-run TestX" to narrow.
SKEW_KUBE_VERSION := $(shell awk '$$1 == "require" && $$2 == "k8s.io/kubernetes" {print $$3}' hack/tools/kube-apiserver/go.mod)
SKEW_KUBE_MINOR := $(word 2,$(subst ., ,$(SKEW_KUBE_VERSION)))
SKEW_APISERVER := _output/bin/kube-apiserver-$(SKEW_KUBE_VERSION)
$(SKEW_APISERVER): hack/tools/kube-apiserver/go.mod
	$(GO) -C hack/tools/kube-apiserver build -o $(abspath $@) \
	  -ldflags "-X k8s.io/component-base/version.gitVersion=$(SKEW_KUBE_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(SKEW_KUBE_MINOR)" \
	  k8s.io/kubernetes/cmd/kube-apiserver
integration-skew: build kustomize $(SKEW_APISERVER)
	@GO=$(GO) KUBE_VERSION=$(KUBE_VERSION) SKEW_APISERVERS="$(SKEW_KUBE_VERSION)=$(abspath $(SKEW_APISERVER))" \
	QGPU_TRACES=$(abspath $(QGPU_TRACES)) KUSTOMIZE_BIN=$(abspath _output/bin/kustomize) SKEW_TEST_FLAGS="$(SKEW_TEST_FLAGS)" \
	  hack/integration-skew.sh

# The kustomize CLI the README's deploy section runs (`kustomize edit set
# image`), pinned in hack/tools/kustomize; TestREADMEDeploy runs it.
kustomize: _output/bin/kustomize
_output/bin/kustomize: hack/tools/kustomize/go.mod
	$(GO) -C hack/tools/kustomize build -o $(abspath _output/bin/kustomize) sigs.k8s.io/kustomize/kustomize/v5

lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

# Bounded fault runs on a real cluster, each ending with the invariant
# checker (test/chaos, docs/reliability.md); the last line is
# `violations <n>`. CHAOS_FLAGS="-pods 500 -run chaos-run-name" to narrow.
chaos: build $(BIN)/qgpu-chaos
	@$(BIN)/qgpu-chaos $(CHAOS_FLAGS)

# mutants: each listed production line that guards a card's capacity (the
# ledger, the agent's fail-safes, the watch's release paths, the checker,
# the chaos observer) broken in turn through go's -overlay, the tests of its
# packages run; every mutant must be killed (test/mutants, docs/checking.md).
# The last line is `mutants N killed N survived 0`. MUTANTS_FLAGS="-only ledger" narrows.
mutants:
	@$(GO) run ./test/mutants $(MUTANTS_FLAGS)

# mutants-list (part of make test): every mutant's original text is found
# exactly once and its changed file type-checks in its package with its
# tests; seconds, no tests run. The last line is `mutants N apply N invalid 0`.
mutants-list:
	@$(GO) run ./test/mutants -list

$(BIN)/qgpu-chaos: FORCE
	$(GO) build -o $@ ./test/chaos

# BenchmarkPolicies reads the openb trace's pod shapes from QGPU_TRACES (as
# make integration does), else a generated set that mimics them.
bench:
	QGPU_TRACES=$(abspath $(QGPU_TRACES)) $(GO) test -run=NONE -bench=. -benchmem ./plugins/...

# Scheduling throughput against stock kube-scheduler (test/bench/throughput);
# SIZE=large: 5000 nodes, 20000 pods, 2 rounds (about 10 minutes). Where the
# openb trace is in QGPU_TRACES, the qgpu-scheduler phase's pods are its
# gpuspec10 list's (model filters included) on nodes of its card models;
# otherwise synthetic ones. Component logs go to _output/.
SIZE ?= default
THROUGHPUT_TRACE = $(abspath $(QGPU_TRACES))/openb_pod_list_gpuspec10.csv
bench-throughput:
	@mkdir -p _output
	$(GO) run ./test/bench/throughput $(if $(filter large,$(SIZE)),--nodes 5000 --pods 20000 --rounds 2,--nodes 500 --pods 4000) $(if $(wildcard $(THROUGHPUT_TRACE)),--pods-from $(THROUGHPUT_TRACE)) 2>_output/bench-throughput.log

# Kubernetes' own scheduler benchmark, scheduler_perf, on the openb trace's
# nodes and pod shapes (test/bench/perf, docs/performance.md#scheduler_perf):
# the QGPU profile, the same profile with a no-op plugin in QGPU's place,
# and stock kube-scheduler with whole-card pods, each in a fresh etcd,
# apiserver and scheduler; per size and run, SchedulingThroughput per case
# and the ratios `qgpu/no-op X` and `qgpu/stock Y`, then the
# per-extension-point latencies. PERF_NODES (default 500; 500,5000 for
# both), PERF_RUNS (default 3). Not part of make test (minutes per run).
# scheduler_perf starts an etcd binary from PATH: the one pinned in
# hack/tools/etcd. JSON results and templates in _output/bench-perf,
# component logs in _output/bench-perf/logs (kept only for failed cases).
PERF_NODES ?= 500
PERF_RUNS ?= 3
# PERF_FILL / PERF_MEASURE: the init and measured pods' shares of the cards
# (default 0.35 and 0.30, test/bench/perf's DefaultSizing).
PERF_FILL ?= 0.35
PERF_MEASURE ?= 0.30
ETCD_VERSION := $(shell awk '$$1 == "require" && $$2 == "go.etcd.io/etcd/server/v3" {print $$3}' hack/tools/etcd/go.mod)
ETCD_BIN := _output/bin/etcd-$(ETCD_VERSION)
$(ETCD_BIN): hack/tools/etcd/go.mod
	$(GO) -C hack/tools/etcd build -o $(abspath $@) go.etcd.io/etcd/server/v3
_output/bench-perf/bin/etcd: $(ETCD_BIN)
	@mkdir -p $(@D)
	ln -sf $(abspath $(ETCD_BIN)) $@
bench-perf: _output/bench-perf/bin/etcd
	@rm -rf _output/bench-perf/results _output/bench-perf/logs; mkdir -p _output/bench-perf/results _output/bench-perf/logs
	{ cd test/bench/perf && PATH=$(abspath _output/bench-perf/bin):$$PATH ARTIFACTS=$(abspath _output/bench-perf/logs) \
	  QGPU_TRACES=$(abspath $(QGPU_TRACES)) $(GO) test -run=NONE -bench=BenchmarkPerf -benchtime=1ns -timeout=180m . \
	  -perf-nodes=$(PERF_NODES) -perf-runs=$(PERF_RUNS) -perf-fill=$(PERF_FILL) -perf-measure=$(PERF_MEASURE) -perf-out=$(abspath _output/bench-perf/results); \
	  echo $$? >$(abspath _output/bench-perf/rc); } 2>&1 | tee _output/bench-perf/bench.log | grep --line-buffered -E '^(bench-perf|  [A-Z]|ok|FAIL|--- FAIL)'; \
	  exit $$(cat _output/bench-perf/rc)

# The FGD paper's trace replay, every policy, both modes; CSV and plot in
# _output/replay (docs/performance.md). hack/fetch-traces.sh fetches the
# public trace (alibaba/clusterdata, a pinned commit, checked by SHA-256)
# into _output/traces; TRACES=<dir> uses a copy of those files instead (checked,
# never overwritten). REPLAY_SEEDS=42 for a short run.
TRACES ?=
TRACE_DIR = $(or $(TRACES),_output/traces)
REPLAY_SEEDS ?= 42-51
REPLAY_FLAGS = --nodes $(TRACE_DIR)/openb_node_list_gpu_node.csv --pods $(TRACE_DIR)/openb_pod_list_default.csv --policy all --seeds $(REPLAY_SEEDS) --out _output/replay
replay:
	@FETCH_TRACES=$(if $(TRACES),0,1) hack/fetch-traces.sh $(TRACE_DIR)
	$(GO) run ./test/replay $(REPLAY_FLAGS) --mode paper
	$(GO) run ./test/replay $(REPLAY_FLAGS) --mode qgpu

clean:
	rm -rf $(BIN) _output
