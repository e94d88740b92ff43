//go:build tools

// Package tools pins what scripts/install-gitops-crds.sh builds and reads in go.mod:
// controller-gen, and the Flux HelmRelease API types it generates the HelmRelease CRD from.
package tools

import (
	_ "github.com/fluxcd/helm-controller/api/v2"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
