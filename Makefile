# Gantry. The README's two commands are `make dev` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: dev serve test build agent images generate bench fuzz clean screenshots

dev: ## local cluster with simulated GPU nodes + Gantry on SQLite at http://127.0.0.1:8080
	$(GO) run -tags dev -ldflags "$(LDFLAGS)" ./cmd/gantry dev

serve: ## Gantry alone on embedded defaults (no cluster: launches are recorded, not applied; images from a local signed registry)
	GANTRY_IMAGES_DEV_REGISTRY=true $(GO) run -tags dev -ldflags "$(LDFLAGS)" ./cmd/gantry serve

test: ## the whole test suite: drift, vet, spec lint, SQLite + PostgreSQL tests, fuzz
	.ci/test

build: ## build bin/gantry (production: no development sign-in, registry or local cluster) and bin/gantry-dev (-tags dev)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/gantry ./cmd/gantry
	$(GO) build -tags dev -ldflags "$(LDFLAGS)" -o bin/gantry-dev ./cmd/gantry

generate: ## regenerate api/model, api/gen and api/client from openapi.yaml and docs/configuration.md from the options table
	$(GO) generate ./...

bench: ## run the benchmarks (both store backends, local clusters, the read API under load) into bench.txt, benchstat-ready
	.ci/with-postgres $(GO) test -tags dev -run='^$$' -bench=. -benchmem -count=6 ./internal/render ./internal/store ./internal/authz ./internal/authn ./internal/weblogin ./internal/imageverify | tee bench.txt
	GANTRY_TEST_CLUSTER=1 $(GO) test -tags dev -run='^$$' -bench=BenchmarkLaunch -count=6 ./internal/e2e | tee -a bench.txt
	GANTRY_TEST_CLUSTER=1 $(GO) test -tags dev -run='^$$' -bench=BenchmarkSubmitToRunning -benchtime=1x -count=3 ./internal/e2e | tee -a bench.txt
	GANTRY_TEST_CLUSTER=1 $(GO) test -tags dev -run='^$$' -bench=BenchmarkSustainedLaunch -benchtime=2x -timeout=20m ./internal/e2e | tee -a bench.txt
	.ci/with-postgres $(GO) test -tags dev -run='^$$' -bench=ReadAPI -benchtime=20000x -count=3 ./internal/loadgen | tee -a bench.txt

FUZZTIME ?= 10m
fuzz: ## every fuzzer for FUZZTIME each (default 10 minutes; CI runs short ones), each under an 8 GB memory limit; findings land in testdata/fuzz
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/template
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzRender -fuzztime=$(FUZZTIME) ./internal/render
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./internal/yamldoc
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzLocalPath -fuzztime=$(FUZZTIME) ./internal/weblogin
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/imagecat
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/team
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/quantity
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzReadOpenB -fuzztime=$(FUZZTIME) ./internal/forecast
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/nodegroup
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/fleet
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzBatch -fuzztime=$(FUZZTIME) ./internal/telemetry
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzCheck -fuzztime=$(FUZZTIME) ./internal/jsonscan
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzFrames -fuzztime=$(FUZZTIME) ./internal/interactive
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzWorkloadJSON -fuzztime=$(FUZZTIME) ./api
	ulimit -v 8000000 && $(GO) test -run='^$$' -fuzz=FuzzParseProfiles -fuzztime=$(FUZZTIME) ./internal/carbon

screenshots: ## refresh docs/portal/*.png: the portal's main pages, from its browser test on a local cluster
	mkdir -p docs/portal
	GANTRY_TEST_CLUSTER=1 GANTRY_SCREENSHOTS=$(CURDIR)/docs/portal $(GO) test -tags dev -count=1 -run 'TestPortal' ./internal/e2e

clean:
	rm -rf bin bench.txt

PUSH ?=
KEY  ?=
images: ## Gantry's two images without a container engine, reproducible, into the OCI layout bin/images; PUSH=registry/prefix pushes them, KEY=cosign.pem signs them there
	$(GO) run ./cmd/gantry-images -out bin/images $(if $(PUSH),-push $(PUSH)) $(if $(KEY),-key $(KEY))

agent: ## build bin/gantry-agent (cgo: go-nvml)
	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $(GO) build -ldflags "$(LDFLAGS)" -o bin/gantry-agent ./cmd/gantry-agent
