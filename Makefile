# The README's test command. -p 2 matches the two cores of the CI machines;
# the e2e packages each start one embedded control plane. The packages whose
# goroutines share state (the scheduler's queue and cache, leader election)
# run again under the race detector.
.PHONY: test build
test:
	go test -p 2 -timeout 45m ./...
	go test -race -timeout 10m ./internal/scheduler/... ./internal/leader/... ./internal/chaos/... ./internal/etcdretry/...

build:
	go build -o capstan ./cmd/capstan
