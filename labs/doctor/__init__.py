"""The doctor: the debugging flowchart as read-only checks, for a lab or any GPU cluster.

Pod events -> node allocatable and labels -> operand DaemonSets -> ClusterPolicy and the
operator -> logs of the pods a finding points at -> node internals -> network. Every check
is a small function over one read of the cluster (one list per kind); what it finds names
its evidence, what it means, a command that fixes it, and which other findings it explains,
so the report can put the root cause first.
"""
