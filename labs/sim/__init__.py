"""The local rehearsal backend: moto for AWS, a Kubernetes API emulator, and the world controllers."""
