//go:build tools

// Package metricsserver pins the metrics-server the rehearsal runs (the EKS stack's
// metrics-server addon). It is a module of its own, not part of go/controlplane: that module
// replaces every k8s.io library with the control plane's 1.35 release, while metrics-server
// is built and tested by its authors against the k8s.io libraries its own go.mod requires.
package metricsserver

import (
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)
