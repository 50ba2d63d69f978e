"""The AWS side of a rehearsal: moto in server mode, the lab's account seeded in it, and
the EKS calls moto answers differently from EKS."""
