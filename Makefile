# The README's test command. -p 2 matches the two cores of the CI machines;
# the e2e packages each start one embedded control plane.
.PHONY: test build
test:
	go test -p 2 -timeout 30m ./...

build:
	go build -o capstan ./cmd/capstan
