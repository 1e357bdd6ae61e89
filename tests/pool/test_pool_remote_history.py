"""`condor_history -startd -name <node>` (GET_HISTORY) answered by execd as by condor_startd.

One pool with HTCondor's own startd and an execd beside it (a node name of its own).
condor_startd runs two jobs and writes its STARTD_HISTORY; a copy of that file (then an
empty one, none, records with a malformed one, rotated backups) is the history file of
both execute points, and the chroot's condor_history asks each the same questions: the
output, the errors and the exit codes must be the same. Then the history knob undefined
(error 5) and remote history disabled (HISTORY_HELPER_MAX_CONCURRENCY = 0, error 10).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from pathlib import Path

import pool_harness as harness
from pool_node import PoolNode, start_node

from execd.errors import ProtocolError
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.commands import Command
from execd.wire.security import ClientSecurity, connect, start_command
from execd.wire.sinful import parse_sinful

WAIT_S = 60
HISTORY_DIR = "/var/lib/condor/execd-history-test"  # in the chroot; both daemons read it
STARTD_CONFIG = "/etc/condor/config.d/99-execd-startd-history.conf"
EXECD_NAME = "execd-history.test"
JOB = """\
executable = /bin/echo
arguments = hello
transfer_executable = false
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
output = out.$(Process)
log = job.log
request_cpus = 1
request_memory = 64
queue 2
"""
# Records in HTCondor's format: a good one, one with a line that is no `Attr = expr`,
# one whose attribute name has a blank in it (ClassAd::Insert takes any text before
# the `=`), one with an expression over two lines, one with trailing text after an expression,
# one of another type (EPOCH), one with comments and blanks, and one being written.
ODD_RECORDS = """\
ClusterId = 901
ProcId = 0
Owner = "alice"
JobStatus = 4
Cmd = "/bin/true"
QDate = 1700000000
CompletionDate = 1700000100
RemoteWallClockTime = 100.0
JobPrio = 0
ImageSize = 10
Weight = ClusterId * 2
*** Offset = 0 ClusterId = 901 ProcId = 0 Owner = "alice" CurrentTime = 1700000100
ClusterId = 902
this line is not an attribute
Owner = "bob"
*** Offset = 200 ClusterId = 902 ProcId = 0 Owner = "bob" CurrentTime = 1700000200
ClusterId = 908
My Attr = 1
Owner = "heidi"
*** Offset = 230 ClusterId = 908 ProcId = 0 Owner = "heidi" CurrentTime = 1700000230
ClusterId = 906
Split = (1
+ 2)
*** Offset = 250 ClusterId = 906 ProcId = 0 Owner = "frank" CurrentTime = 1700000250
ClusterId = 907
Trailing = 1 2
Owner = "grace"
*** Offset = 260 ClusterId = 907 ProcId = 0 Owner = "grace" CurrentTime = 1700000260
ClusterId = 903
Owner = "carol"
*** EPOCH ClusterId = 903 ProcId = 0 Owner = "carol" CurrentTime = 1700000300
# a comment

ClusterId = 904
ProcId = 1
Owner = "dave"
*** Offset = 400 ClusterId = 904 ProcId = 1 Owner = "dave" CurrentTime = 1700000400
ClusterId = 905
Owner = "eve"
"""


def history(pool: harness.Pool, node: str, *args: str) -> tuple[int, str, str]:
    """condor_history -startd of `node`, named by its first slot (a node name without a
    dot, "vm", is not one condor_history can turn into a daemon name)."""
    done = pool.tool("condor_history", "-startd", "-name", f"slot1@{node}", *args)
    return done.returncode, done.stdout, done.stderr


def compare(pool: harness.Pool, startd: str, cases: list[list[str]]) -> None:
    for args in cases:
        ours = history(pool, EXECD_NAME, *args)
        theirs = history(pool, startd, *args)
        assert ours == theirs, (args, ours, theirs)


async def raw_history(address: str, query: WireAd) -> list[list[WireAd]]:
    """GET_HISTORY with `query` as written (what condor_history cannot send): the ads of
    each message, until the end ad, or [] last when the connection closes before it."""
    target = parse_sinful(address)
    channel = await connect(target, timeout_s=10)
    messages: list[list[WireAd]] = []
    try:
        await start_command(channel, target, Command.GET_HISTORY, ClientSecurity(timeout_s=10))
        await channel.send(encode_ad(channel.encoder(), query).payload())
        while True:
            try:
                payload = await channel.recv(10)
            except (ProtocolError, OSError, asyncio.IncompleteReadError):
                return [*messages, []]
            dec = channel.decoder(payload)
            messages.append([])
            while not dec.at_end():
                messages[-1].append(decode_ad(dec))
            if messages[-1] and messages[-1][-1].get("Owner") == "0":
                return messages
    finally:
        await channel.close()


# Queries only a program (or another client) sends: error ads, no answer, no streaming.
RAW_QUERIES: list[WireAd] = [
    {"HistoryRecordSource": '"STARTD"', "Projection": "5"},  # error 3
    {"HistoryRecordSource": '"STARTD"', "Projection": '{ "ClusterId", 1 }'},  # error 3
    {"HistoryRecordSource": '"STARTD"', "Projection": '{ "ClusterId", "ProcId" }'},
    {"HistoryRecordSource": '"STARTD"', "Projection": "1/0"},  # an error value: 3 too
    {"HistoryRecordSource": '"DAEMON"'},  # error 6
    {"HistoryRecordSource": '"STARTD"', "NumJobMatches": "1"},  # not streamed: one message
    {"HistoryRecordSource": '"STARTD"', "StreamResults": "true", "ScanLimit": "1",
     "Projection": '"ClusterId,ProcId,Cmd"'},
    {"HistoryRecordSource": '"STARTD"', "Since": "1", "Projection": '"ProcId"'},  # a job id
    {"HistoryRecordSource": '"STARTD"', "Since": '"nonsense"'},  # the child ends: closed
    {"HistoryRecordSource": '"STARTD"', "Since": "ProcId == 0",
     "HistoryReadForwards": "true"},  # condor_history refuses -forwards with -since
    {"HistoryRecordSource": '"STARTD"', "HistoryAdTypeFilter": '"ALL"',
     "Projection": '"ClusterId"'},
    {"HistoryRecordSource": '"STARTD"', "HistoryFromDir": "true"},
    {"Projection": '"ClusterId"'},  # no source: the HISTORY knob
    {"HistoryRecordSource": '"STARTD"', "NumJobMatches": "0", "ScanLimit": "0"},  # no limits
    {"HistoryRecordSource": '"STARTD"', "Requirements": "ProcId == 1",
     "Projection": '"ProcId"', "StreamResults": "false"},
    {"HistoryRecordSource": '"STARTD"', "HistoryAdTypeFilter": '"EPOCH"'},  # none
    {"HistoryRecordSource": '"STARTD"', "Since": "e", "Projection": '"ClusterId"'},  # an expr
    {"HistoryRecordSource": '"STARTD"', "Since": "(1)"},  # a literal, no job id: closed
    {"HistoryRecordSource": '"STARTD"', "HistoryAdTypeFilter": '"-JOB"'},  # `-type -JOB`
    {"HistoryRecordSource": '"STARTD"', "Requirements": '"\\377"'},  # a string, not UTF-8
    {"HistoryRecordSource": '"JOB_EPOCH"', "HistoryFromDir": "true"},  # a file: closed
]  # fmt: skip


def startd_name(pool: harness.Pool) -> str:
    names = [row[0] for row in pool.status_af("Name", what="-startd") if row[0] != EXECD_NAME]
    assert names == [pool.tool("hostname").check().stdout.strip()], names
    assert len(names) == 1, names
    return names[0]


def reconfigure(pool: harness.Pool, node: PoolNode, text: str, *, restart: bool) -> None:
    """The same extra config for condor_startd (reconfig or restart) and execd (SIGHUP)."""
    pool.host_path(STARTD_CONFIG).write_text(text)
    pool.tool("condor_restart" if restart else "condor_reconfig", "-startd").check()
    node.config.write_text(node.config.read_text() + text)
    assert node.proc is not None
    node.proc.send_signal(signal.SIGHUP)
    node.wait_for("reconfig_applied", timeout=WAIT_S)


def test_condor_history_of_execd_is_condor_startds(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=True)
    shared = pool.host_path(HISTORY_DIR)
    shutil.rmtree(shared, ignore_errors=True)
    shared.mkdir(parents=True)
    # condor_startd writes a history of its own for this test (in its LOG, where it may
    # write): this test's two jobs only, whatever ran on it earlier in the session
    written = pool.tool("condor_config_val", "LOG").check().stdout.strip() + \
        "/execd-test-startd-history"
    pool.host_path(written).unlink(missing_ok=True)
    pool.host_path(STARTD_CONFIG).write_text(f"STARTD_HISTORY = {written}\n")
    try:
        pool.tool("condor_reconfig", "-startd").check()
        harness.wait_for("condor_startd's own history file", lambda: pool.tool(
            "condor_config_val", "-startd", "STARTD_HISTORY").stdout.strip() == written,
            WAIT_S)  # fmt: skip
        job = pool.submit(JOB)
        harness.wait_for("both jobs in the startd's history", lambda: pool.host_path(
            written).exists() and pool.host_path(written).read_text().count(
            "*** Offset") >= 2 and job.events().count("005") == 2, WAIT_S)  # fmt: skip
        real = pool.host_path(written).read_text()
        assert real.count("*** Offset") == 2, real
        current = shared / "startd_history"
        current.write_text(real)
        config = (f"STARTD_HISTORY = {HISTORY_DIR}/startd_history\n"
                  f"HISTORY = {HISTORY_DIR}/history\n"
                  f"JOB_EPOCH_HISTORY_DIR = {HISTORY_DIR}/startd_history\n")  # no directory
        pool.host_path(STARTD_CONFIG).write_text(config)
        pool.tool("condor_reconfig", "-startd").check()
        first, second = job.cluster, job.cluster  # one cluster, procs 0 and 1
        with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
            node = start_node(pool, Path(tmp), f"NETWORK_HOSTNAME = {EXECD_NAME}\n"
                              f"STARTD_HISTORY = {current}\n"
                              f"HISTORY = {shared / 'history'}\n"
                              f"JOB_EPOCH_HISTORY_DIR = {current}\n")  # fmt: skip
            try:
                harness.wait_for("execd's daemon ad", lambda: EXECD_NAME in [
                    row[0] for row in pool.status_af("Name", what="-startd")], WAIT_S)
                startd = startd_name(pool)
                # the real file condor_startd wrote
                compare(pool, startd, [
                    [], ["-l"], ["-json"], ["-forwards"], ["-forwards", "-l"],
                    ["-constraint", f"ClusterId == {first} && ProcId == 1"],
                    ["-constraint", "Owner =!= undefined", "-af", "ProcId", "Owner"],
                    ["-constraint", "ClusterId == "],  # does not parse: the tool says so
                    ["-constraint", "NoSuchAttr + 1"],
                    ["-limit", "1"], ["-match", "1", "-forwards"], ["-scanlimit", "1"],
                    ["-af", "ClusterId", "ProcId", "ExitCode", "Cmd"],
                    ["-attributes", "ClusterId,ProcId,JobStatus", "-l"],
                    ["-since", f"{second}.0"], ["-since", "ProcId == 0", "-af", "ProcId"],
                    [str(first)], [f"{first}.1"], ["-wide"],
                ])  # fmt: skip
                theirs_at = next(row[1] for row in pool.status_af("Name", "MyAddress",
                                                              what="-startd")
                             if row[0] == startd)  # fmt: skip
                answers = []
                for query in RAW_QUERIES:
                    ours_raw = asyncio.run(raw_history(node.address(), query))
                    theirs_raw = asyncio.run(raw_history(theirs_at, query))
                    assert ours_raw == theirs_raw, (query, ours_raw, theirs_raw)
                    answers.append(ours_raw)
                assert answers[0] == [[{"Owner": "0", "ErrorCode": "3", "ErrorString":
                                        '"Unable to convert projection list to string list"'}]]
                assert [len(message) for message in answers[5]] == [2]  # not streamed
                assert answers[5][0][1] == {"Owner": "0", "NumJobMatches": "1",
                                            "MalformedAds": "0", "AdCount": "1"}
                assert [len(message) for message in answers[6]] == [1, 1, 1]  # streamed
                assert answers[8] == answers[9] == answers[17] == answers[18] == [[]]
                assert answers[20] == [[]]
                assert answers[16][-1][-1]["NumJobMatches"] == "2"  # Since = e: never true
                assert answers[19][-1][-1]["NumJobMatches"] == "0"  # answered, no match
                listed = history(pool, EXECD_NAME, "-af", "ClusterId", "ProcId")[1]
                assert sorted(listed.splitlines()) == [
                    f"{first} 0", f"{first} 1"], listed  # the comparisons saw both jobs
                # rotated backups: the oldest read last (newest first) or first (-forwards)
                (shared / "startd_history.20240101T000000").write_text(ODD_RECORDS)
                compare(pool, startd, [[], ["-forwards", "-af", "ClusterId"], ["-l"]])
                (shared / "startd_history.20240101T000000").unlink()
                # a malformed record, one of another type, comments, a record being written
                current.write_text(ODD_RECORDS)
                compare(pool, startd, [[], ["-l"], ["-forwards", "-l"],
                                       ["-af", "ClusterId", "Weight", "Trailing"],
                                       ["-limit", "2"],
                                       ["-attributes", "Weight", "-l"]])  # fmt: skip
                assert history(pool, EXECD_NAME, "-af", "ClusterId")[1] == "904\n907\n908\n901\n"
                # an answer without streaming over 64 KB: execd sends it in packets as it
                # is built (encrypted, the message's end in its last one); the same ads
                current.write_text("".join(
                    f'ClusterId = {n}\nProcId = 0\nCmd = "{"x" * 300}"\n*** Offset = {n} '
                    f"ClusterId = {n} ProcId = 0 CurrentTime = 0\n" for n in range(400)))
                whole = {"HistoryRecordSource": '"STARTD"', "Projection": '"ClusterId,Cmd"'}
                ours_raw = asyncio.run(raw_history(node.address(), whole))
                assert ours_raw == asyncio.run(raw_history(theirs_at, whole))
                assert [len(message) for message in ours_raw] == [401]  # one message
                current.write_text("")  # empty
                compare(pool, startd, [[], ["-l"], ["-forwards"]])
                current.unlink()  # none
                compare(pool, startd, [[], ["-af", "ClusterId"]])
                assert history(pool, EXECD_NAME)[0] == 0
                # the knob undefined: error 5; then remote history disabled: error 10
                reconfigure(pool, node, "STARTD_HISTORY =\n", restart=False)
                harness.wait_for("condor_startd's error 5", lambda: history(
                    pool, startd)[0] == 5, WAIT_S)  # fmt: skip
                compare(pool, startd, [[], ["-l"]])
                reconfigure(pool, node, "HISTORY_HELPER_MAX_CONCURRENCY = 0\n", restart=True)
                harness.wait_for("condor_startd's error 10", lambda: history(
                    pool, startd)[0] == 10, WAIT_S)  # fmt: skip
                compare(pool, startd, [[], ["-af", "ClusterId"]])
                code, _out, err = history(pool, EXECD_NAME)
                assert (code, err) == (
                    10, "Error 10: Remote history has been disabled on this startd\n")
                assert node.running()
            finally:
                node.stop(signal.SIGQUIT)
    finally:
        pool.host_path(STARTD_CONFIG).unlink(missing_ok=True)
        pool.host_path(written).unlink(missing_ok=True)
        shutil.rmtree(shared, ignore_errors=True)
        pool.tool("condor_restart", "-startd")  # as the next test expects it: no test config
        harness.wait_for("condor_startd answering without the test's config", lambda: history(
            pool, pool.tool("hostname").stdout.strip())[0] == 0, WAIT_S)  # fmt: skip
