"""Which of a job's std files are streamed (execd.wire.streamed_output.streamed): its
StreamOut/StreamErr read as condor_starter reads them (ClassAd LookupBool)."""

from __future__ import annotations

import pytest

from execd.wire.output_files import std_files
from execd.wire.streamed_output import streamed


@pytest.mark.parametrize(("value", "streams"), [
    (True, True), (1, True), (2.5, True), (False, False), (0, False), ("true", False),
])  # fmt: skip
def test_stream_output_is_read_as_lookupbool_reads_it(value: object, streams: bool) -> None:
    """condor_starter's jic_shadow reads StreamOut with LookupBool: a number not 0 is
    true (stream_output = 1 streams, as on condor_starter)."""
    job = {"Out": "out.txt", "StreamOut": value}
    assert streamed(job, "Out") is streams


@pytest.mark.parametrize(("value", "sandbox_file"), [
    (1, None), (True, None), (0, "_condor_stdout"), (False, "_condor_stdout"),
])  # fmt: skip
def test_a_streamed_stdout_is_no_sandbox_file_whichever_way_true_is_written(
        value: object, sandbox_file: str | None) -> None:  # fmt: skip
    """The stream and the sandbox's std files agree: stdout streamed (StreamOut 1) is
    neither written to nor sent back from `_condor_stdout`."""
    assert std_files({"Out": "out.txt", "StreamOut": value}) == (sandbox_file, None)
