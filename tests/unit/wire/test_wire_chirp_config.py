"""The ENABLE_CHIRP* knobs as condor_starter reads them (jic_shadow.cpp initIOProxy,
recordDelayedUpdate): what a job's condor_chirp is served, over real loopback
connections to execd's proxy. The pool tier compares the same configurations with
condor_startd (tests/pool/test_pool_chirp_knobs.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from test_wire_chirp_proxy import Client, ScriptedShadow, answer

from execd.config.loader import load_config
from execd.config.settings import Settings
from execd.wire.chirp_config import ChirpConfig, ChirpGrants, job_grants
from execd.wire.chirp_start import adopt_chirp_proxy, open_chirp_proxy
from execd.wire.encoding import Decoder
from execd.wire.output_files import CHIRP_CONFIG
from execd.wire.shadow_file_calls import ShadowFileCalls

IO = {"WantIOProxy": True}


def settings(tmp_path: Path, text: str) -> Settings:
    config = tmp_path / "execd_config"
    config.write_text(f"LOCAL_DIR = {tmp_path}\n{text}")
    return Settings(load_config(config, env={}))


def test_the_knobs_are_read_from_the_config_with_htcondors_defaults(tmp_path: Path) -> None:
    assert ChirpConfig.from_settings(settings(tmp_path, "")) == \
        ChirpConfig(True, True, True, True, "Chirp*", 100)  # fmt: skip
    text = """\
ENABLE_CHIRP_IO = false
STARTER.ENABLE_CHIRP_UPDATES = false
ENABLE_CHIRP_DELAYED = 1 == 2
CHIRP_DELAYED_UPDATE_PREFIX = Foo*, Bar
CHIRP_DELAYED_UPDATE_MAX_ATTRS = 2 * 3
"""
    read = ChirpConfig.from_settings(settings(tmp_path, text))
    assert read == ChirpConfig(True, False, False, False, "Foo*, Bar", 6)
    assert read.prefixes == ("Foo*", "Bar")


@pytest.mark.parametrize(("knobs", "job", "grants"), [
    ({}, {}, ChirpGrants(io=False, updates=False, delayed=True)),
    ({}, IO, ChirpGrants(io=True, updates=True, delayed=True)),
    ({"enabled": False}, IO, None),
    ({"io": False, "updates": False, "delayed": False}, {"JobUniverse": 10}, None),
    # ENABLE_CHIRP_IO = false: a job that asked for updates only through WantIOProxy
    # gets none either; one that says WantRemoteUpdates does.
    ({"io": False}, IO, ChirpGrants(io=False, updates=False, delayed=True)),
    ({"io": False}, {**IO, "WantRemoteUpdates": True}, ChirpGrants(False, True, True)),
    ({"updates": False}, IO, ChirpGrants(io=True, updates=False, delayed=True)),
    ({"delayed": False}, {}, None),
    ({"delayed": False}, {"JobUniverse": 10}, ChirpGrants(False, False, False)),
    ({}, {"WantDelayedUpdates": False}, None),
])  # fmt: skip
def test_what_a_job_is_granted(knobs: dict[str, bool], job: dict[str, object],
                               grants: ChirpGrants | None) -> None:  # fmt: skip
    assert job_grants(job, ChirpConfig(**knobs)) == grants


def chirp_session(sandbox: Path, ids: tuple[int, int], job: dict[str, object],
                  config: ChirpConfig, requests: list[str], *,
                  shadow: ScriptedShadow | None = None) -> list[bytes] | None:  # fmt: skip
    """Each request's answer line from the job's proxy; None where it gets no proxy."""
    async def main() -> list[bytes] | None:
        proxy = await open_chirp_proxy(ShadowFileCalls(shadow or ScriptedShadow()), job, "j",
                                       sandbox, owner=ids, connected=lambda: True,
                                       config=config)  # fmt: skip
        if proxy is None:
            return None
        assert proxy.address is not None
        try:
            client = await Client.to(proxy.address, proxy.address.cookie)
            answers = [await client.ask(line) for line in requests]
            client.close()
            return answers
        finally:
            await proxy.close()

    return asyncio.run(main())


def test_enable_chirp_false_gives_no_proxy_and_no_config(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    sandbox, ids = box
    assert chirp_session(sandbox, ids, IO, ChirpConfig(enabled=False), []) is None
    assert not (sandbox / CHIRP_CONFIG).exists()


def test_updates_off_answers_minus_8_and_delayed_ones_are_still_served(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    sandbox, ids = box
    answers = chirp_session(sandbox, ids, IO, ChirpConfig(updates=False), [
        "set_job_attr ChirpA 1", "get_job_attr Cmd", "ulog text", "version",
        "set_job_attr_delayed ChirpB 2", "get_job_attr_delayed ChirpB"])
    assert answers == [b"-8", b"-8", b"-8", b"-8", b"0", b"1"]


def test_delayed_off_makes_a_delayed_request_an_update_as_condor_starter_reads_it(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """With ENABLE_CHIRP_DELAYED = false and updates on, `set_job_attr_delayed N V` is
    read as set_job_attr of `_delayed` (a prefix match: condor_starter's order)."""
    sandbox, ids = box
    shadow = ScriptedShadow([answer(-1, 13), answer(0)])
    answers = chirp_session(sandbox, ids, IO, ChirpConfig(delayed=False), [
        "set_job_attr_delayed ChirpB 2", "version", "set_job_attr ChirpA 1"], shadow=shadow)
    assert answers == [b"-2", b"2", b"0"]
    first = Decoder(shadow.sent[0], encrypted=True)
    assert (first.get_int(), first.get_string(), first.get_string()) == \
        (286, "ChirpB", "_delayed")  # fmt: skip
    assert chirp_session(sandbox, ids, {}, ChirpConfig(delayed=False), []) is None


def test_the_prefix_and_the_most_names_are_the_configured_ones(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    sandbox, ids = box
    config = ChirpConfig(prefix="Foo*, exact", max_attrs=2)
    answers = chirp_session(sandbox, ids, {}, config, [
        "set_job_attr_delayed ChirpA 1",  # the default prefix no longer allows it
        "set_job_attr_delayed fooA 1", "set_job_attr_delayed EXACT 2",
        "set_job_attr_delayed exactly 3",  # no wildcard: the whole name
        "set_job_attr_delayed FooB 4",  # a third name: over the most
        "set_job_attr_delayed fooA 5",  # a name already set may change
        "get_job_attr_delayed FooA"])
    assert answers == [b"1", b"0", b"0", b"1", b"1", b"0", b"1"]


def test_a_restart_keeps_the_knobs_the_job_started_with(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """As condor_starter, which read them once for the job: the new image's config
    (delayed updates off since) does not change what the running job is served."""
    sandbox, ids = box

    async def main() -> list[bytes]:
        calls = ShadowFileCalls(ScriptedShadow())
        started = ChirpConfig(prefix="Foo*")
        first = await open_chirp_proxy(calls, {}, "j", sandbox, owner=ids,
                                       connected=lambda: True, config=started)  # fmt: skip
        assert first is not None
        record = first.export_listener()
        assert record is not None
        await first.close()
        again = await adopt_chirp_proxy(record, calls, {}, "j", connected=lambda: True,
                                        config=ChirpConfig(delayed=False))  # fmt: skip
        assert again is not None and again.address is not None
        try:
            client = await Client.to(again.address, again.address.cookie)
            answers = [await client.ask("set_job_attr_delayed FooA 1"),
                       await client.ask("set_job_attr_delayed ChirpA 1")]
            client.close()
            return answers
        finally:
            await again.close()

    assert asyncio.run(main()) == [b"0", b"1"]


def test_a_value_of_the_wrong_type_counts_as_the_default_and_is_logged(
        tmp_path: Path) -> None:  # fmt: skip
    """The load check refuses such a config (Settings.problems names file and line);
    should one reach a job's start anyway, the job starts with the default and a
    warning (condor_starter exits on it: docs/pool.md "Differences")."""
    text = "STARTER.ENABLE_CHIRP_IO = maybe\nSTARTER.CHIRP_DELAYED_UPDATE_MAX_ATTRS = many\n"
    with capture_logs() as events:
        read = ChirpConfig.from_settings(settings(tmp_path, text))
    assert (read.io, read.max_attrs) == (True, 100)
    assert sorted(e["knob"] for e in events if e["event"] == "chirp_knob_invalid") == \
        ["CHIRP_DELAYED_UPDATE_MAX_ATTRS", "ENABLE_CHIRP_IO"]  # fmt: skip
