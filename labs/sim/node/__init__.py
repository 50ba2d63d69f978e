"""What runs inside a simulated GPU node: its hardware, container runtime, the NVIDIA
runtime, the programs a container runs, and the streams kubectl exec and cp reach."""
