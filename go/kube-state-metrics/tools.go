//go:build tools

// Package kubestatemetrics pins the kube-state-metrics release whose series the lab's alert
// rules read. It is a module of its own, built and tested by its authors against the k8s.io
// libraries its own go.mod requires, not the control plane's.
package kubestatemetrics

import (
	_ "k8s.io/kube-state-metrics/v2"
)
