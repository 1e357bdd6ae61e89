"""Errors that say whose fault it is (DESIGN.md, house style 7)."""

from __future__ import annotations


class ExecdError(Exception):
    """Base of every error execd raises on purpose."""


class ConfigError(ExecdError):
    """The configuration is wrong: names the file and line where it is known."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}: {self.message}"
        if self.file is not None:
            return f"{self.file}: {self.message}"
        return self.message


class PolicyError(ExecdError):
    """The policy engine was asked for something its state does not allow."""


class SpawnError(ExecdError):
    """A program could not be started."""


class SpawnNotFoundError(SpawnError):
    """The program does not exist."""


class SpawnNotExecutableError(SpawnError):
    """The program exists but cannot be executed."""


class SpawnNoPermissionError(SpawnError):
    """The program may not be run by the user it should run as."""


class CgroupError(ExecdError):
    """A cgroup operation failed (kernel refused, hierarchy missing, ...)."""


class ProtocolError(ExecdError):
    """A peer broke the protocol."""


class LocalProtocolError(ProtocolError):
    """We were about to break the protocol: a bug on our side."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol: its fault, the connection is dropped."""


class ResourceError(ExecdError):
    """A request for resources cannot be met (more than exists, negative, unknown)."""
