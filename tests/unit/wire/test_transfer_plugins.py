"""What execd reads from file transfer plugins: their `-classad` answer (the texts are
those HTCondor 25.14's curl_plugin and data_plugin print) and a multi-file run's
outfile (curl_plugin's, for a URL served and one that 404s), and the hold a failed
run becomes, in condor_starter's words."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from execd.config.loader import load_config
from execd.config.settings import load_settings
from execd.daemon.pool_conversation import job_plugin_mode
from execd.wire.transfer_plugins import (
    SUBCODE_EXEC_FAILED,
    SUBCODE_NO_RESULT,
    FileResult,
    Plugin,
    PluginError,
    PluginRun,
    PluginTable,
    parse_plugin_classad,
    parse_result_ads,
    plugin_errors,
    plugin_failure,
    single_failure,
    url_safe,
)

CURL_CLASSAD = """MultipleFileSupport = true
PluginVersion = "0.2"
PluginType = "FileTransfer"
ProtocolVersion = 4
SupportedMethods = "http,https,ftp,file,dav,davs"
"""
DATA_CLASSAD = """PluginVersion = "0.1"
PluginType = "FileTransfer"
SupportedMethods = "data"
"""
CURL = "/usr/libexec/condor/curl_plugin"
URL_OK, URL_404 = "http://127.0.0.1:18765/data.txt", "http://127.0.0.1:18765/missing.txt"
OUTFILE = (
    f'[ TransferUrl = "{URL_OK}"; TransferType = "download"; DeveloperData = [ '
    'TransferTries = 1; LibcurlReturnCode = 0; TransferHTTPStatusCode = 200 ]; '
    'TransferSuccess = true; TransferFileName = "/sandbox/got.txt"; TransferProtocol = "http"; '
    'TransferFileBytes = 10; TransferTotalBytes = 10 ]'
    f'[ TransferUrl = "{URL_404}"; TransferType = "download"; TransferError = "The requested '
    'URL returned error: 404"; TransferSuccess = false; TransferFileName = "/sandbox/miss.txt"; '
    'TransferErrorData = { [ ErrorCode = 22; ErrorType = "Specification" ] }; '
    'TransferTotalBytes = 0 ]'
    + " " * 200  # HTCondor preallocates the outfile with spaces
)  # fmt: skip


def test_curl_plugins_classad_is_a_multi_file_plugin_of_six_methods() -> None:
    plugin = parse_plugin_classad(CURL, CURL_CLASSAD)
    assert plugin == Plugin(CURL, ("http", "https", "ftp", "file", "dav", "davs"),
                            multi_file=True, version="0.2", kind="FileTransfer", protocol=4)


def test_data_plugin_without_multiple_file_support_is_a_single_file_plugin() -> None:
    plugin = parse_plugin_classad("/p/data_plugin", DATA_CLASSAD)
    assert plugin.methods == ("data",) and not plugin.multi_file and plugin.protocol == 1


def test_a_bad_line_is_skipped_as_condor_starter_skips_it() -> None:
    plugin = parse_plugin_classad("/p/x", "# comment\n\nthis is no classad line\n"
                                  'SupportedMethods = "x"\n')  # fmt: skip
    assert plugin.methods == ("x",)


@pytest.mark.parametrize("text", ["", "Segmentation fault\n", 'PluginVersion = "1"\n',
                                  'SupportedMethods = ""\n', "SupportedMethods = 3\n"])
def test_an_answer_without_methods_is_an_error_naming_the_plugin(text: str) -> None:
    with pytest.raises(PluginError) as raised:
        parse_plugin_classad("/p/broken", text)
    assert str(raised.value) == "/p/broken -classad did not produce a valid classad, ignoring"


def test_the_advertised_methods_are_sorted_with_s3_and_gs_after_https() -> None:
    """As condor_starter -classad's HasFileTransferPluginMethods (seen in the pool:
    "data,dav,davs,file,ftp,http,https,s3,gs" for curl_plugin and data_plugin)."""
    table = PluginTable()
    table.add(parse_plugin_classad(CURL, CURL_CLASSAD))
    table.add(parse_plugin_classad("/p/data_plugin", DATA_CLASSAD))
    assert table.methods_attr() == "data,dav,davs,file,ftp,http,https,s3,gs"
    assert PluginTable().methods_attr() == ""
    only_data = PluginTable()
    only_data.add(parse_plugin_classad("/p/data_plugin", DATA_CLASSAD))
    assert only_data.methods_attr() == "data"


def test_a_later_plugin_takes_over_a_method_and_urls_find_their_plugin() -> None:
    table = PluginTable()
    table.add(parse_plugin_classad(CURL, CURL_CLASSAD))
    table.add(parse_plugin_classad("/p/mine", 'SupportedMethods = "https,osdf"\n'))
    paths = {url: getattr(table.for_url(url), "path", None)
             for url in ("https://x/y", "http://x/y", "osdf+https://x/y", "gopher://x/y")}
    assert paths == {"https://x/y": "/p/mine", "http://x/y": CURL,
                     "osdf+https://x/y": "/p/mine", "gopher://x/y": None}


def test_the_outfile_gives_one_result_per_url() -> None:
    assert parse_result_ads(OUTFILE) == [
        FileResult(URL_OK, "/sandbox/got.txt", True, "", 10),
        FileResult(URL_404, "/sandbox/miss.txt", False, "The requested URL returned error: 404"),
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["", " " * 100, "garbage", "[ TransferSuccess = ", "\x00\xff"])
def test_an_outfile_of_garbage_has_no_results(text: str) -> None:
    assert parse_result_ads(text) == []


def test_a_404_is_held_with_the_exit_code_shifted_and_the_plugins_words() -> None:
    """What the pool showed for curl_plugin's 404 on condor_startd: subcode 256."""
    failed = plugin_failure(CURL, PluginRun(exit_code=1), parse_result_ads(OUTFILE), "/s/.out")
    assert failed == (256, f"FILETRANSFER:1:non-zero exit (1) from {CURL}. |Error: The "
                           f"requested URL returned error: 404 ( URL file = {URL_404} )|")


def test_every_url_fetched_is_no_failure() -> None:
    ok = [FileResult(URL_OK, "/sandbox/got.txt", True)]
    assert plugin_failure(CURL, PluginRun(), ok, "/s/.out") is None


def test_garbage_in_the_outfile_holds_the_job_naming_the_plugin_and_the_file() -> None:
    failed = plugin_failure(CURL, PluginRun(exit_code=0, outfile="garbage"), [], "/s/.curl.out")
    assert failed == (SUBCODE_NO_RESULT, f"FILETRANSFER:1:|Error: file transfer plugin {CURL} "
                      "exited (exit code 0), no valid classads in output file /s/.curl.out")


def test_a_run_is_judged_by_its_exit_and_failed_results_go_on_the_stack() -> None:
    """As condor_starter: a plugin that exits 0 succeeded, whatever its results say;
    a result without TransferSuccess or with TransferSuccess = false is an error on
    the stack (a later failure's reason shows it), worded as condor's (two spaces, the
    URL as it is before the parenthesis)."""
    signed = "https://b.example/o?sig=1"
    results = [FileResult(signed, "/sandbox/a", None),
               FileResult(URL_OK, "/sandbox/b", False, "denied")]
    subcode, pushed = plugin_errors(CURL, PluginRun(), results, "/s/.out")
    assert subcode is None
    assert pushed == [
        f"FILETRANSFER:1:non-zero exit (0) from {CURL}. |Error: File transfer plugin {CURL} "
        f"exited without producing a TransferSuccess result  ({signed})|",
        f"FILETRANSFER:1:non-zero exit (0) from {CURL}. |Error: denied ( URL file = {URL_OK} )|"]
    subcode, pushed = plugin_errors(CURL, PluginRun(exit_code=1), results[:1], "/s/.out")
    assert subcode == 1 << 8 and len(pushed) == 1
    # no generic message where the stack already has one (condor checks the shared stack)
    _, quiet = plugin_errors(CURL, PluginRun(exit_code=2), [FileResult(URL_OK, "/s/b", True)],
                             "/s/.out", stack_empty=False)  # fmt: skip
    assert quiet == []


def test_a_huge_transfer_error_is_cut() -> None:
    failed = [FileResult(URL_OK, "/s/b", False, "x" * 100_000)]
    _, reason = plugin_failure(CURL, PluginRun(exit_code=1), failed, "/s/.out") or (0, "")
    assert 2048 < len(reason) < 3000 and "x" * 2048 + "..." in reason


def test_a_plugin_that_timed_out_is_held_with_etime() -> None:
    run = PluginRun(timed_out=True, timeout_s=5, outfile="")
    failed = plugin_failure(CURL, run, [], "/s/.out")
    assert failed is not None and failed[0] == errno.ETIME


def test_a_plugin_killed_by_a_signal_is_held_with_the_signal() -> None:
    failed = plugin_failure(CURL, PluginRun(signal=11, outfile=""), [], "/s/.out")
    assert failed == (11, f"FILETRANSFER:1:|Error: file transfer plugin {CURL} exited "
                          "(signal 11), no valid classads in output file /s/.out")


def test_a_plugin_that_cannot_be_run_is_held_naming_why() -> None:
    failed = plugin_failure(CURL, PluginRun(exec_error="Permission denied"), [], "/s/.out")
    assert failed == (SUBCODE_EXEC_FAILED,
                      f"FILETRANSFER:1:FILETRANSFER: Failed to execute {CURL}: Permission denied")


def test_a_single_file_plugins_failure_takes_its_printed_error() -> None:
    output = 'TransferUrl = "data:,x"\nTransferError = "bad data URL"\nTransferSuccess = false\n'
    assert single_failure("/p/data_plugin", PluginRun(exit_code=1), output) == (
        256, "FILETRANSFER:1:non-zero exit (1) from /p/data_plugin. |Error: bad data URL "
             "( URL file = data:,x )|")  # fmt: skip
    assert single_failure("/p/data_plugin", PluginRun(), "") is None


def test_a_urls_query_never_reaches_the_hold_reason() -> None:
    """A presigned URL's signature is a secret: `?...` in its place, as UrlSafePrint."""
    signed = "https://bucket.example/obj?X-Amz-Signature=secret&X-Amz-Credential=key"
    failed = [FileResult(signed, "/sandbox/obj", False, "denied")]
    _, reason = plugin_failure(CURL, PluginRun(exit_code=1), failed, "/s/.out") or (0, "")
    assert "secret" not in reason and "( URL file = https://bucket.example/obj?... )" in reason
    _, single = single_failure(CURL, PluginRun(exit_code=1), f'TransferUrl = "{signed}"\n') \
        or (0, "")  # fmt: skip
    assert "secret" not in single and "https://bucket.example/obj?..." in single
    assert url_safe("data:,what?") == "data:,what?"  # no URL with a host: as it is


def test_the_jobs_own_plugins_take_over_their_methods_as_multi_file_plugins() -> None:
    """TransferPlugins = "methods=plugin; ...": not asked -classad, protocol 2. As
    condor_starter builds such a job's table with an error stack it drops, an entry
    without `=` is skipped and the node's discovery errors do not follow its failures."""
    table = PluginTable(errors=["FILETRANSFER:1:No output from /x -classad, ignoring"])
    table.add(parse_plugin_classad(CURL, CURL_CLASSAD))
    own = table.with_job_plugins("HTTPS,mine = my_plugin.sh; broken")
    assert own.for_url("https://x/y") == Plugin("my_plugin.sh", ("HTTPS", "mine"),
                                                multi_file=True, protocol=2, from_job=True)
    assert own.for_url("mine://x/y") is own.for_url("https://x/y")
    assert own.for_url("http://x/y").path == CURL  # type: ignore[union-attr]
    assert own.errors == []
    assert own.methods_attr() == "dav,davs,file,ftp,http,HTTPS,mine,s3,gs"
    assert table.for_url("https://x/y").path == CURL  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "job", "mode"), [
    (None, {}, 0), ("false", {}, 0), ("0", {}, 0), ("-3", {}, 0), ("true", {}, 1),
    ("7", {}, 1), ("2", {}, 2), ('TARGET.Owner == "alice"', {"Owner": "alice"}, 1),
    ('TARGET.Owner == "alice"', {"Owner": "bob"}, 0),
])  # fmt: skip
def test_the_knob_on_job_plugins_reads_as_condor_starters_param_integer(
        tmp_path: Path, value: str | None, job: dict[str, object], mode: int) -> None:  # fmt: skip
    """STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS: <= 0 allow, 2 ignore, else fail."""
    config = tmp_path / "condor_config"
    knob = "" if value is None else f"STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS = {value}"
    config.write_text(knob + "\n")
    settings = load_settings(load_config(config, env={}))
    assert job_plugin_mode(settings, None, job) == mode
