"""The local rehearsal backend: moto for AWS, the real Kubernetes control plane, its controllers."""
