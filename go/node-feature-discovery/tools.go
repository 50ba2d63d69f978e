//go:build tools

// Package nodefeaturediscovery pins Node Feature Discovery v0.17.3, the release the GPU
// Operator v25.3.4 chart deploys as its subchart: nfd-master, nfd-worker and nfd-gc run as the
// chart's pods on the rehearsal's nodes, reading each node's made-up PCI devices.
package nodefeaturediscovery

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-gc"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
