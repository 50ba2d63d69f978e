"""The one base class of the errors a user can act on.

Every error the tool raises for bad input or a state the user must fix derives from
`LabError`; the Invoke front prints its message and exits non-zero, while anything
else is a bug and keeps its traceback.
"""


class LabError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class InfraError(LabError, RuntimeError):
    """Infrastructure could not be planned, applied, read or destroyed; the message says why."""


class CommandError(LabError):
    """A lab command (up, scale, down) could not go on; the message says what to do."""


class NotRecorded(CommandError):
    """The backend change was made, but the lab's files could not record it (a full disk)."""


class ReadOnlyTarget(LabError):
    """The target is a cluster the tool did not create: it is only ever read."""


def explain(error: BaseException) -> str:
    """A LabError's own message (it already says what to do); anything else with its type."""
    return str(error) if isinstance(error, LabError) else f"{type(error).__name__}: {error}"
