"""The V2 argument syntax of the ssh knobs and condor_base64's key text
(execd/wire/condor_args.py), as condor_starter's ArgList and condor_base64_encode."""

from __future__ import annotations

import base64

import pytest

from execd.wire.condor_args import condor_base64, split_args_v2, split_quoted_args


def test_the_default_keygen_arguments_split_as_condor_starter_splits_them() -> None:
    assert split_quoted_args("\"-N '' -C '' -q -f %f -t rsa\"") == [
        "-N", "", "-C", "", "-q", "-f", "%f", "-t", "rsa"]
    assert split_quoted_args('"-i -e -f %f"') == ["-i", "-e", "-f", "%f"]


def test_single_quotes_group_and_a_doubled_one_is_a_quote() -> None:
    assert split_args_v2("a 'b c' 'it''s' d'e f'g") == ["a", "b c", "it's", "de fg"]
    assert split_args_v2("  ") == []


@pytest.mark.parametrize("bad", ["-i -e", '"-i', "\"'open\""])
def test_a_knob_not_in_double_quotes_or_with_an_open_quote_is_an_error(bad: str) -> None:
    with pytest.raises(ValueError):
        split_quoted_args(bad)


def test_keys_are_sent_in_64_column_lines_without_the_last_newline() -> None:
    key = bytes(range(256)) * 3
    text = condor_base64(key)
    lines = text.split("\n")
    assert all(len(line) == 64 for line in lines[:-1]) and 0 < len(lines[-1]) <= 64
    assert not text.endswith("\n")
    assert base64.b64decode(text.replace("\n", "")) == key
