"""The HTCondor configuration language and execd's settings registry."""
