"""Invoke front of eks-gpu-lab: parse arguments, call into `labs`/`scenarios`, print.

Heavy libraries (boto3, kubernetes) are imported inside the tasks so that
`invoke --list` stays fast.
"""

from invoke import Collection

ns = Collection()
