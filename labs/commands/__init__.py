"""The lab's own commands, one module each: up, scale, down, status, smoke and demo.

`tasks.py` parses a command's flags and calls its module; the scenario commands live in
`labs.run`, the doctor in `labs.doctor` and practice in `labs.practice`.
"""
