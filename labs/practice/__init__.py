"""Practice: blind exercises on the scenario contract, and each learner's record over the weeks.

`exercise` picks, injects unnamed, checks a fix, grades an answer; `record` keeps it all in
one SQLite file in the state directory.
"""
