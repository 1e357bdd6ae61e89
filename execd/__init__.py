"""execd: an HTCondor execute point (startd + starter) for Linux."""

__version__ = "0.1.0"
