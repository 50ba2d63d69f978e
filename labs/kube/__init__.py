"""The Kubernetes side: the watched view, GPU facts read off objects, their writes, probes."""
