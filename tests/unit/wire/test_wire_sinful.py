"""Daemon addresses as HTCondor writes them, and COLLECTOR_HOST forms."""

from __future__ import annotations

import pytest
from wire_captures import stream

from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.encoding import Decoder
from execd.wire.framing import unframe_plain
from execd.wire.sinful import (
    AddressError,
    collector_address,
    parse_sinful,
    v1_address,
    with_alias,
)


def test_real_connect_sinful_with_ipv6_and_shared_port() -> None:
    message = unframe_plain(stream("job1.pcap", 12759, 2673))[1]
    dec = Decoder(message)
    dec.get_int()
    text = to_classad(decode_ad(dec))["ConnectSinful"]
    address = parse_sinful(text)
    assert (address.host, address.port) == ("fd00::2", 2673)
    assert address.shared_port_id == "negotiator_32201_ba75"
    assert address.params["addrs"] == "127.0.0.1-2673+[fd00--2]-2673"
    assert "noUDP" in address.params and address.params["alias"] == "vm"
    assert address.host_port == "[fd00::2]:2673"
    assert parse_sinful(str(address)) == address


def test_plain_and_minimal_forms() -> None:
    assert parse_sinful("127.0.0.1:9618").shared_port_id is None
    assert str(parse_sinful("<10.0.0.1:5?sock=collector>")) == "<10.0.0.1:5?sock=collector>"


@pytest.mark.parametrize("bad", ["", "<>", "host", "<host:>", "<host:99999>", "<[::1>",
                                 "<[::1]9618>", "host:port"])  # fmt: skip
def test_bad_addresses_are_named(bad: str) -> None:
    with pytest.raises(AddressError, match="bad daemon address"):
        parse_sinful(bad)


@pytest.mark.parametrize(
    ("text", "host", "port", "sock"),
    [
        ("cm.example.org", "cm.example.org", 9618, None),
        ("cm.example.org:9620", "cm.example.org", 9620, None),
        ("cm1:9618, cm2:9618", "cm1", 9618, None),
        ("<127.0.0.1:4000?sock=collector>", "127.0.0.1", 4000, "collector"),
        ("[fd00::2]:9619", "fd00::2", 9619, None),
        ("[fd00::2]", "fd00::2", 9618, None),
    ],
)
def test_collector_host_forms(text: str, host: str, port: int, sock: str | None) -> None:
    address = collector_address(text)
    assert (address.host, address.port, address.shared_port_id) == (host, port, sock)


def test_empty_collector_host_is_an_error() -> None:
    with pytest.raises(AddressError, match="COLLECTOR_HOST is empty"):
        collector_address(" , ")


def test_alias_goes_where_htcondor_writes_it() -> None:
    """As condor_startd 25's: <127.0.0.1:34047?addrs=127.0.0.1-34047&alias=vm&noUDP&...>"""
    assert with_alias("<127.0.0.1:5?addrs=127.0.0.1-5&noUDP>", "node.example") == \
        "<127.0.0.1:5?addrs=127.0.0.1-5&alias=node.example&noUDP>"
    assert with_alias("<127.0.0.1:5?addrs=127.0.0.1-5&noUDP&sock=execd>", "vm") == \
        "<127.0.0.1:5?addrs=127.0.0.1-5&alias=vm&noUDP&sock=execd>"
    assert with_alias("<127.0.0.1:5?addrs=127.0.0.1-5&noUDP>", "") == \
        "<127.0.0.1:5?addrs=127.0.0.1-5&noUDP>"


def test_address_v1_is_htcondors_list_of_source_routes() -> None:
    """condor_startd 25.14.1's AddressV1 of <127.0.0.1:34047?addrs=127.0.0.1-34047&alias=vm&
    noUDP&sock=startd_867243_246d>, seen in the pool."""
    assert v1_address("<127.0.0.1:34047?addrs=127.0.0.1-34047&alias=vm&noUDP"
                      "&sock=startd_867243_246d>") == (
        '{[ p="primary"; a="127.0.0.1"; port=34047; n="Internet"; alias="vm"; '
        'spid="startd_867243_246d"; noUDP=true; ], [ p="IPv4"; a="127.0.0.1"; port=34047; '
        'n="Internet"; alias="vm"; spid="startd_867243_246d"; noUDP=true; ]}')
    # a bare address: its IP literal is its one public route; a host name has none
    assert v1_address("<10.0.0.3:9618>") == ('{[ p="primary"; a="10.0.0.3"; port=9618; '
                                             'n="Internet"; ], [ p="IPv4"; a="10.0.0.3"; '
                                             'port=9618; n="Internet"; ]}')  # fmt: skip
    assert v1_address("<cm.example:9618>") == \
        '{[ p="primary"; a="cm.example"; port=9618; n="Internet"; ]}'  # fmt: skip
