"""Merging cron ads into slot ads: SlotMergeConstraint, SlotName/Name, SlotTypeId, SlotId."""

from __future__ import annotations

from typing import Any

from execd.classads import new_ad
from execd.hooks.cron_merge import ad_matches_slot, merge_into_slots
from execd.hooks.cron_output import parse_cron_output


def slots(n: int = 4, type_of: dict[int, int] | None = None) -> dict[str, Any]:
    types = type_of or {}
    return {
        f"slot{i}": new_ad({"Name": f"slot{i}@node.example", "SlotID": i,
                            "SlotTypeID": types.get(i, 1), "Cpus": i})
        for i in range(1, n + 1)
    }


def test_seed_example_value_10_everywhere_but_slot1_and_slot2() -> None:
    # seed 003's example, as the job prints it
    text = "Value=1\nSlotId=1\n-s1\nValue=2\nSlotId=2\n-s2\nValue=10\n- update:true\n"
    ads, _ = parse_cron_output(text)
    merged = merge_into_slots([a.attrs for a in ads], slots(4))
    assert {s: m["Value"] for s, m in merged.items()} == {
        "slot1": "1", "slot2": "2", "slot3": "10", "slot4": "10",
    }
    assert all("SlotId" not in m for m in merged.values())  # targeting attrs not merged


def test_constraint_is_evaluated_with_the_slot_as_target() -> None:
    ad = {"SlotMergeConstraint": "TARGET.Cpus >= Want", "Want": "3", "Big": "true"}
    merged = merge_into_slots([ad], slots(4))
    assert [s for s, m in merged.items() if "Big" in m] == ["slot3", "slot4"]
    assert "SlotMergeConstraint" not in merged["slot3"]


def test_constraint_wins_over_slot_id() -> None:
    ad = {"SlotMergeConstraint": "TARGET.SlotID == 4", "SlotId": "1", "X": "1"}
    assert [s for s, m in merge_into_slots([ad], slots(4)).items() if m] == ["slot4"]


def test_name_prefix_matches_slot_names() -> None:
    ad = {"SlotName": '"slot1"', "X": "1"}
    many = slots(12)
    matched = [s for s, m in merge_into_slots([ad], many).items() if m]
    assert matched == ["slot1", "slot10", "slot11", "slot12"]  # prefix, as HTCondor does
    assert ad_matches_slot({"Name": '"slot2@"'}, many["slot2"])
    assert not ad_matches_slot({"Name": '"slot2@"'}, many["slot12"])


def test_slot_type_id_then_slot_id() -> None:
    layout = slots(4, type_of={3: 2, 4: 2})
    by_type = merge_into_slots([{"SlotTypeId": "2", "X": "1"}], layout)
    assert [s for s, m in by_type.items() if m] == ["slot3", "slot4"]
    both = {"SlotTypeId": "2", "SlotId": "1", "X": "1"}  # SlotTypeId comes first
    assert [s for s, m in merge_into_slots([both], layout).items() if m] == ["slot3", "slot4"]


def test_a_constraint_that_is_undefined_or_an_error_matches_nothing() -> None:
    ads = [{"SlotMergeConstraint": "TARGET.NoSuchAttr > 1", "X": "1"},
           {"SlotMergeConstraint": '"text" + 1', "Y": "1"}]
    assert all(m == {} for m in merge_into_slots(ads, slots(2)).values())


def test_later_ads_override_earlier_ones() -> None:
    merged = merge_into_slots([{"V": "1"}, {"V": "2", "W": "3"}], slots(1))
    assert merged["slot1"] == {"V": "2", "W": "3"}
