"""The real Kubernetes control plane the rehearsal runs, built from its Go modules, and the
world's way to it: its PKI and kubeconfigs, a REST client, the objects a lab starts with."""
