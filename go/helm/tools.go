//go:build tools

// Package helm pins the helm the rehearsal installs charts with, as terraform's helm provider
// does on EKS; a learner runs the same binary (`helm list -n gpu-operator`).
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
