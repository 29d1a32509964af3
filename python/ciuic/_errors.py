"""The exceptions ciuic raises: one class per library status."""


class CiuicError(RuntimeError):
    """An error reported by the ciuic library.

    Attributes:
        code: the library's status name ("unavailable", "deadline_exceeded", ...).
        rank: for a failure of another rank (dead, unreachable, stalled), the
            rank the library names; None otherwise.
    """

    code = "unknown"
    rank = None


class InvalidArgumentError(CiuicError, ValueError):
    """An argument or a CIUIC_* variable is wrong (the message names it)."""


class NotFoundError(CiuicError):
    """Something named does not exist (a file, a device, a knob)."""


class FailedPreconditionError(CiuicError):
    """The call cannot run in this state or on this machine (says why)."""


class ResourceExhaustedError(CiuicError):
    """Memory, registrations or connections ran out."""


class UnavailableError(CiuicError):
    """A peer died or cannot be reached; `.rank` names it."""


class DeadlineExceededError(CiuicError, TimeoutError):
    """Not done within the timeout (a stalled peer: `.rank` names it)."""


class AbortedError(CiuicError):
    """The context was aborted, or failed earlier: it refuses further calls."""


class UnimplementedError(CiuicError, NotImplementedError):
    """Not supported by this build or this transport."""


class DataLossError(CiuicError):
    """Data arrived corrupted or a peer broke the protocol."""


class InternalError(CiuicError):
    """A bug in ciuic: please report it with the message."""


# The library's status codes (include/ciuic/status.h) -> classes.
BY_CODE = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: FailedPreconditionError,
    4: ResourceExhaustedError,
    5: UnavailableError,
    6: DeadlineExceededError,
    7: AbortedError,
    8: UnimplementedError,
    9: DataLossError,
    10: InternalError,
}

# A peer failure under the name users look for.
PeerError = UnavailableError
