"""eks-gpu-lab: the lab lifecycle, its clouds and clusters, and the local rehearsal backend."""
