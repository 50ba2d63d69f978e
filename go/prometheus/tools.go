//go:build tools

// Package prometheus pins the Prometheus release whose promtool tests the lab's alert rules
// (`monitoring/gpu-alerts.yaml`) and whose server evaluates them in the rehearsal. It is a
// module of its own: Prometheus requires its own k8s.io and cloud SDK versions, which the
// control plane's module must not share.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
