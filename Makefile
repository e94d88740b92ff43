# configsum — see README.md. `make demo` shows it working; `make test` runs every test.
.PHONY: all build test lint fmt demo certs bench clean

CARGO ?= cargo

all: build

build:
	$(CARGO) build --release --bin configsum

## test: formatting, clippy, and every unit, property and end-to-end test.
test: lint
	$(CARGO) test --all-targets

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## demo: serve examples/objects.yaml over TLS and admit an example Deployment; no cluster needed.
demo:
	scripts/demo.sh

## certs: a development CA and serving certificate in certs/out (KEY_TYPE=ec-sec1|ec-pkcs8|rsa-pkcs1).
certs:
	certs/make-dev-certs.sh certs/out

## bench: micro-benchmark of one review through the pure path.
bench:
	$(CARGO) bench --bench review

clean:
	$(CARGO) clean
	rm -rf .demo certs/out
