"""The real Kubernetes control plane the rehearsal runs, built from its Go modules."""
