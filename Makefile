# nodeward build and test entry points. `make test` is what CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
STATICCHECK_VERSION ?= v0.8.2
GOBIN_DIR := $(shell go env GOPATH)/bin
# The package timeout bounds a hung control plane; the slowest packages finish in minutes.
TEST_FLAGS ?= -timeout 20m

.PHONY: all build image must-gather-image test test-unit testbin lint demo chaos clean soak dashboards

all: build

# grpcnotrace keeps gRPC from linking golang.org/x/net/trace, whose HTML
# templates switch off the linker's removal of unused methods: without it the
# binary is 45 MB instead of 33 MB (1ea6e6d) and the agent's resident memory grows with
# it (docs/benchmarks.md, agent RSS).
BUILD_TAGS := grpcnotrace

build:
	go build -tags $(BUILD_TAGS) -ldflags "$(LDFLAGS)" -o bin/nodeward ./cmd/nodeward

# image writes the OCI image of a static nodeward (no cgo: nothing to link at
# run time in a FROM-scratch image) as an OCI image-layout tarball, with no
# daemon, no base image and no registry (tools/ociimage); it prints the tag
# and the digest. The same commit and Go toolchain give the same digest:
# -trimpath, the layer's times are the commit's (SOURCE_DATE_EPOCH).
IMAGE_TAG ?= nodeward:$(VERSION)
IMAGE_OUT ?= bin/nodeward-image.oci.tar
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

image:
	@mkdir -p bin/static "$$(dirname "$(IMAGE_OUT)")"
	CGO_ENABLED=0 go build -trimpath -tags $(BUILD_TAGS) -ldflags "$(LDFLAGS)" -o bin/static/nodeward ./cmd/nodeward
	@digest="$$(SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run ./tools/ociimage -tag "$(IMAGE_TAG)" -out "$(IMAGE_OUT)" \
		-file bin/static/nodeward:/nodeward:0755 -symlink /usr/bin/gather:/nodeward -entrypoint /nodeward)"; \
		echo "image $(IMAGE_TAG) $$digest in $(IMAGE_OUT)"

# must-gather-image writes the image `oc adm must-gather --image=…` runs: the
# same static binary (entrypoint /usr/bin/gather) and the userland oc's
# gather and copy containers call (bash, df, awk, sed, sleep, sync, pkill,
# rsync, tar, …), copied from this Debian host's packages with their shared
# libraries and loader, a list of those packages and versions and their
# copyright files (tools/ociimage/must-gather.userland, docs/must-gather.md).
# A separate tarball: `make image` stays FROM scratch. The same commit, Go
# toolchain and Debian packages give the same digest.
MUST_GATHER_IMAGE_TAG ?= nodeward-must-gather:$(VERSION)
MUST_GATHER_IMAGE_OUT ?= bin/nodeward-must-gather-image.oci.tar

must-gather-image:
	@mkdir -p bin/static "$$(dirname "$(MUST_GATHER_IMAGE_OUT)")"
	CGO_ENABLED=0 go build -trimpath -tags $(BUILD_TAGS) -ldflags "$(LDFLAGS)" -o bin/static/nodeward ./cmd/nodeward
	@digest="$$(SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run ./tools/ociimage -tag "$(MUST_GATHER_IMAGE_TAG)" -out "$(MUST_GATHER_IMAGE_OUT)" \
		-file bin/static/nodeward:/nodeward:0755 -symlink /usr/bin/gather:/nodeward -entrypoint /usr/bin/gather \
		-userland tools/ociimage/must-gather.userland)"; \
		echo "image $(MUST_GATHER_IMAGE_TAG) $$digest in $(MUST_GATHER_IMAGE_OUT)"

# testbin builds the real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok), the kubelet, the
# Machine API controllers of test/machineapi and CRI-O with pinns (test/node's
# CRI-O node) into the cache; only what is missing is built.
testbin:
	bash test/tools/install.sh >/dev/null

# deps installs the Debian packages the tests need (as root; otherwise it
# names them and the command that installs them); deps-demo, the demo's.
deps:
	bash test/tools/deps.sh test

deps-demo:
	bash test/tools/deps.sh demo

# test runs everything: unit tests and the end-to-end tests against the real
# control plane. Tests that need the control plane find it through
# NODEWARD_TESTBIN_DIR.
test: deps testbin build
	NODEWARD_TESTBIN_DIR="$$(bash test/tools/install.sh 2>/dev/null | tail -1)" \
		go test $(TEST_FLAGS) ./...
	# The Helm chart against the kustomize manifests: its own module, so that
	# Helm's dependencies stay out of nodeward's.
	cd test/helmsync && go test $(TEST_FLAGS) ./...
	# The dashboards' generator (Grafana's foundation SDK, its own module):
	# the checked-in JSON is its output, and every runbook names a panel.
	cd tools/dashboards && go test $(TEST_FLAGS) ./...

# dashboards writes the Grafana dashboards and their OpenShift console
# variants (manifests/, charts/nodeward/dashboards) from tools/dashboards.
dashboards:
	cd tools/dashboards && go run .

# test-unit runs only what needs neither root nor the control plane.
test-unit:
	go test -short $(TEST_FLAGS) ./...

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd test/helmsync && go vet ./...
	cd tools/dashboards && go vet ./...
	@[[ -x $(GOBIN_DIR)/staticcheck ]] || go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN_DIR)/staticcheck ./...
	cd tools/dashboards && $(GOBIN_DIR)/staticcheck ./...
	NODEWARD_TESTBIN_DIR="$${NODEWARD_TESTBIN_DIR:-}" bash test/deploy/lint.sh

# demo rolls a new OS out over 6 simulated nodes on the local control plane
# (coordinator, UpdatePool maxUnavailable 2) and leaves no process behind.
demo: deps-demo testbin
	NODEWARD_TESTBIN_DIR="$$(bash test/tools/install.sh 2>/dev/null | tail -1)" go run ./test/demo

# chaos runs the full chaos run (docs/reliability.md): 30 real agent
# processes, two coordinator replicas, 40 faults on its own control plane.
# CHAOS_SEED=N replays the fault plan of a run. `make test` runs the reduced
# size (docs/reliability.md).
chaos: testbin
	NODEWARD_TESTBIN_DIR="$$(bash test/tools/install.sh 2>/dev/null | tail -1)" \
		go test ./test/chaos -run 'TestChaos$$' -v -count=1 -timeout 40m -chaos.full $(if $(CHAOS_SEED),-chaos.seed=$(CHAOS_SEED))

clean:
	rm -rf bin
	go clean -testcache

# soak plays the corpus and 100,000 fresh seeded schedules of the protocol
# simulator from a start drawn at random (make test plays the corpus and
# 2,000); it prints the command that replays its range (docs/reliability.md).
soak:
	go test -timeout 3h ./test/protosim -run TestSimulate -protosim.seeds=100000
