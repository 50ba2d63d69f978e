//go:build tools

// Package gpuoperator pins the NVIDIA GPU Operator the rehearsal runs: v25.3.4, the newest
// release the Go module proxy serves (the EKS stack installs v26.3.1). It is a module of its
// own, built against the k8s.io libraries NVIDIA's go.mod requires, not the control plane's;
// the operand manifests and the helm chart come from the same module zip.
package gpuoperator

import (
	_ "github.com/NVIDIA/gpu-operator/cmd/gpu-operator"
)
