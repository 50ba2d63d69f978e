"""The rehearsal world's controllers: the parts of EKS, the kubelet, the device plugin and the
GPU Operator that no real component plays here, each a small level-triggered API client
(see `base`)."""
