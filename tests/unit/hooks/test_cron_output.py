"""Parsing startd cron output: Attr = value lines, '-' delimiters, tags, update:bool."""

from __future__ import annotations

from execd.hooks.cron_output import CronOutputParser, parse_cron_output


def test_lines_make_one_ad_without_a_delimiter() -> None:
    ads, bad = parse_cron_output('Color = "blue"\nCount=3\n')
    assert bad == []
    assert len(ads) == 1
    assert ads[0].attrs == {"Color": '"blue"', "Count": "3"}
    assert ads[0].tag is None and ads[0].update is None
    assert ads[0].full_name("COLOR") == "COLOR"


def test_dash_ends_an_ad_and_names_it_with_update_flag() -> None:
    text = "Value=1\nSlotId=1\n-s1\nValue=2\n- s2 update:false\nValue=10\n- update:true\n"
    ads, bad = parse_cron_output(text)
    assert bad == []
    assert [(a.tag, a.update) for a in ads] == [("s1", None), ("s2", False), (None, True)]
    assert [a.full_name("JOB") for a in ads] == ["JOB_s1", "JOB_s2", "JOB"]
    assert ads[0].attrs == {"Value": "1", "SlotId": "1"}


def test_update_with_a_space_after_the_colon() -> None:
    ads, bad = parse_cron_output("A = 1\n- update: true\n")
    assert bad == []
    assert ads[0].tag is None and ads[0].update is True


def test_garbage_lines_are_reported_and_good_lines_still_apply() -> None:
    text = "Good = 1\nthis is not an attribute\nAlso = (1 +\nEmpty =\nFine = \"x\"\n"
    ads, bad = parse_cron_output(text)
    assert ads[0].attrs == {"Good": "1", "Fine": '"x"'}
    assert [(b.number, b.text) for b in bad] == [
        (2, "this is not an attribute"), (3, "Also = (1 +"), (4, "Empty =")
    ]
    assert "ClassAd expression" in bad[1].reason


def test_bad_update_word_is_reported() -> None:
    ads, bad = parse_cron_output("A = 1\n- tag update:maybe\n")
    assert ads[0].tag == "tag" and ads[0].update is None
    assert bad[0].number == 2 and "maybe" in bad[0].reason


def test_incremental_parser_yields_each_ad_at_its_delimiter() -> None:
    parser = CronOutputParser()
    assert parser.feed_line("A = 1") is None
    first = parser.feed_line("- one")
    assert first is not None and first.attrs == {"A": "1"} and first.tag == "one"
    assert parser.feed_line("B = 2") is None
    last = parser.finish()
    assert last is not None and last.attrs == {"B": "2"}
    assert parser.finish() is None


def test_empty_ad_and_comments() -> None:
    ads, bad = parse_cron_output("# a comment\n\n-\n")
    assert bad == []
    assert len(ads) == 1 and ads[0].attrs == {}
