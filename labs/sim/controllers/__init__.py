"""The rehearsal world's controllers: the parts of EKS, kubelet, the scheduler and the GPU
Operator that no API server plays, each a small level-triggered loop (see `base`)."""
