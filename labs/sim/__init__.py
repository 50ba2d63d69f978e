"""The local rehearsal backend: moto for AWS, a Kubernetes API emulator, world controllers."""
