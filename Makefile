# The README's test command. -p 2 matches the two cores of the CI machines;
# the e2e packages each start one embedded control plane. The packages whose
# goroutines share state (the scheduler's queue and cache, leader election,
# the CVO and what it reads releases with) run again under the race detector
# (not internal/monitoring: its goroutines are Prometheus's own, and building
# Prometheus's dependencies for -race costs CI minutes; none of these
# packages' tests links the embedded control plane, whose race build alone
# would take longer than the rest; nor internal/scheduler/differential,
# which runs kube-scheduler's framework on one goroutine and would build
# it again for -race). -vet=off there and in hack/fuzz.sh:
# the first step vetted the same code, and vet's facts are computed again
# for every dependency of a differently instrumented build. Then every fuzz
# target runs on 300 inputs (hack/fuzz.sh; hack/fuzz.sh 10m fuzzes each for
# ten minutes). The console's browser tests
# drive Debian's Chromium, installed first when it is missing. -ldflags=-w
# links the test binaries without DWARF: each of the big ones links in about
# two thirds of the time (panics still print their stacks; build with DWARF
# to debug one).
#
# go test -json goes through hack/testsum, which prints what go test
# prints without -v and ends with a summary of the failures and their
# error lines: a log read from its end still says what failed and why.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.PHONY: test build fuzz
test:
	bash hack/ensure-chromium.sh
	go build -o .testsum ./hack/testsum
	# The integration packages first: they are the long ones, and two
	# slots finish sooner when they do not wait for the short ones.
	go test -json -p 2 -ldflags=-w -timeout 60m ./test/... ./... 2>&1 | ./.testsum
	go test -json -race -vet=off -ldflags=-w -timeout 10m ./internal/scheduler ./internal/scheduler/algorithm ./internal/scheduler/policy ./internal/leader/... ./internal/component/... ./internal/chaos ./internal/etcdretry/... \
		./internal/cvo/... ./internal/release/... ./internal/registry/... ./internal/updateservice/... ./internal/console/... 2>&1 | ./.testsum
	bash hack/fuzz.sh 300x

fuzz:
	bash hack/fuzz.sh 10m

build:
	go build -o capstan ./cmd/capstan
