"""[auth] and [rate_limit] configuration: loading and the ConfigErrors that
stop a half-configured token or mTLS server from starting."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from ans.config import ConfigError, load
from ans.server import FD_RESERVE, connection_caps


def write(tmp: Path, text: str) -> Path:
    p = tmp / "ans.toml"
    p.write_text(text)
    return p


def test_auth_and_rate_limit_sections(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            '[ans]\nagent_id = "agtp://a/agents/ans"\n'
            '[auth]\nmode = "token"\ntoken_issuer = "https://gov"\ntoken_jwks = "k.json"\n'
            "token_leeway = 5\n"
            '[rate_limit]\nrate = 2.5\nburst = 7\nexempt_agent_ids = ["agtp://gov/agents/p"]\n',
        )
    )
    assert cfg.auth_mode == "token" and cfg.token_issuer == "https://gov"
    assert cfg.token_jwks == (tmp_path / "k.json",)  # relative to the file
    assert cfg.audience == "agtp://a/agents/ans"  # defaults to agent_id
    assert cfg.token_leeway == 5
    assert cfg.rate_limit.rate == 2.5 and cfg.rate_limit.burst == 7
    assert cfg.rate_limit.exempt_agent_ids == ("agtp://gov/agents/p",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[auth]\nmode = "kerberos"\n', "auth mode"),
        ('[auth]\nmode = "token"\ntoken_jwks = ["k.json"]\n', "token_issuer"),
        ('[auth]\nmode = "token"\ntoken_issuer = "https://gov"\n', "issuer keys"),
        ('[auth]\nmode = "mtls"\n', "tls_client_ca"),
        (
            '[server]\ntls_certfile = "c"\ntls_keyfile = "k"\n[auth]\nmode = "mtls"\n',
            "tls_client_ca",
        ),
        ('[server]\ntls_client_ca = "ca.pem"\n', "only used with auth mode mtls"),
        ("[rate_limit]\nrate = 0\n", "rate"),
        ("[rate_limit]\nburst = 0\n", "burst"),
        ('[rate_limit]\nburst = "many"\n', "wrong type"),
        ("[rate_limit]\nspeed = 3\n", "unknown key"),
        ("[rate_limit]\nper_address_rate = -1\n", "per_address_rate must be a positive"),
        ("[rate_limit]\nper_address_rate = inf\n", "per_address_rate must be a positive"),
        ("[rate_limit]\nper_address_rate = nan\n", "per_address_rate must be a positive"),
        ('[rate_limit]\nper_address_rate = "fast"\n', "per_address_rate has the wrong type"),
        ("[rate_limit]\nper_address_burst = 0\n", "per_address_burst must be at least 1"),
        ("[rate_limit]\nper_address_burst = 2.5\n", "per_address_burst has the wrong type"),
        ('[rate_limit]\nexempt_addresses = "10.0.0.0/8"\n', "exempt_addresses must be a list"),
        ("[rate_limit]\nexempt_addresses = [10]\n", "exempt_addresses must be a list"),
        (
            '[rate_limit]\nexempt_addresses = ["10.0.0.0/8", "10.0.0.0/33"]\n',
            "exempt_addresses: '10.0.0.0/33' is not an IP address or CIDR network",
        ),
        (
            '[rate_limit]\nexempt_addresses = ["gateway.internal"]\n',
            "'gateway.internal' is not an IP address",
        ),
        ('[auth]\nissuer = "x"\n', "unknown key"),
        ('[auth]\nforwarders = ["agtp://a.example/agents/ans"]\n', "only in auth mode mtls"),
    ],
)
def test_bad_auth_config(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(write(tmp_path, text))


def test_per_address_rate_limit_keys(tmp_path: Path) -> None:
    default = load(None).rate_limit
    assert (default.per_address_rate, default.per_address_burst) == (200.0, 400)
    assert default.exempt_addresses == ()
    cfg = load(
        write(
            tmp_path,
            "[rate_limit]\nper_address_rate = 3\nper_address_burst = 9\n"
            'exempt_addresses = ["127.0.0.1", "10.0.0.0/8", "2001:db8::/32", '
            '"192.0.2.9/24", "::ffff:198.51.100.0/120"]\n',
        )
    ).rate_limit
    assert (cfg.per_address_rate, cfg.per_address_burst) == (3, 9)
    assert cfg.exempt_addresses == tuple(
        ipaddress.ip_network(n)
        for n in (
            "127.0.0.1/32",
            "10.0.0.0/8",
            "2001:db8::/32",
            "192.0.2.0/24",  # host bits allowed
            "198.51.100.0/24",  # IPv4-mapped: the IPv4 network
        )
    )
    off = load(write(tmp_path, "[rate_limit]\nper_address_rate = 0\n")).rate_limit
    assert off.per_address_rate == 0 and not off.per_address().enabled and off.enabled


def test_mtls_complete(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            '[server]\ntls_certfile = "c"\ntls_keyfile = "k"\ntls_client_ca = "ca.pem"\n'
            '[auth]\nmode = "mtls"\n',
        )
    )
    assert cfg.auth_mode == "mtls" and cfg.tls_client_ca == tmp_path / "ca.pem"


MTLS = '[server]\ntls_certfile = "c"\ntls_keyfile = "k"\ntls_client_ca = "ca.pem"\n'


def test_mtls_forwarders(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            MTLS + '[auth]\nmode = "mtls"\nforwarders = ["agtp://a.example/agents/ans"]\n',
        )
    )
    assert cfg.auth_forwarders == ("agtp://a.example/agents/ans",)
    for bad in ('"agtp://a"', '["no scheme"]', '["agtp://a b"]', "[1]", '[""]'):
        with pytest.raises(ConfigError, match="forwarders"):
            load(write(tmp_path, MTLS + f'[auth]\nmode = "mtls"\nforwarders = {bad}\n'))


def test_max_connections_per_client(tmp_path: Path) -> None:
    assert load(None).max_connections_per_client == 256
    cfg = load(write(tmp_path, "[server]\nmax_connections_per_client = 0\n"))
    assert cfg.max_connections_per_client == 0  # no cap
    for bad in ("-1", "2000000", '"many"'):
        with pytest.raises(ConfigError, match="max_connections_per_client"):
            load(write(tmp_path, f"[server]\nmax_connections_per_client = {bad}\n"))


def test_max_connections_and_the_caps_under_the_open_file_limit(tmp_path: Path) -> None:
    assert load(None).max_connections == 4096
    cfg = load(write(tmp_path, "[server]\nmax_connections = 10\n"))
    assert cfg.max_connections == 10
    for bad in ("0", "-1", "2000000", '"lots"'):
        with pytest.raises(ConfigError, match="max_connections"):
            load(write(tmp_path, f"[server]\nmax_connections = {bad}\n"))
    # Together the two listeners stay FD_RESERVE below the open-file limit.
    native = load(None, native_listen="127.0.0.1:0")
    assert connection_caps(load(None), 1024) == (1024 - FD_RESERVE, 0)
    assert connection_caps(native, 1024) == (1024 - FD_RESERVE - 192, 192)
    assert connection_caps(native, 1_048_576) == (4096, 1024)
    assert connection_caps(cfg, 1_048_576) == (10, 0)


def test_the_two_listeners_never_share_a_port() -> None:
    # both would bind it (SO_REUSEPORT) and split connections between two framings
    for listen, native in (
        ("127.0.0.1:4781", "127.0.0.1:4781"),
        ("127.0.0.1:4781", "0.0.0.0:4781"),
        ("0.0.0.0:4781", "[::1]:4781"),
    ):
        with pytest.raises(ConfigError, match="share a port"):
            load(None, listen=listen, native_listen=native)
    assert load(None, listen="127.0.0.1:4781", native_listen="127.0.0.1:4782").native_listen
    assert load(None, listen="127.0.0.1:4781", native_listen="127.0.0.2:4781").native_listen
    assert load(None, listen="127.0.0.1:0", native_listen="127.0.0.1:0").native_listen


def test_request_timeout(tmp_path: Path) -> None:
    assert load(None).request_timeout == 10.0
    assert load(write(tmp_path, "[server]\nrequest_timeout = 2.5\n")).request_timeout == 2.5
    for bad in ("0", "-1", "301", '"soon"'):
        with pytest.raises(ConfigError, match="request_timeout"):
            load(write(tmp_path, f"[server]\nrequest_timeout = {bad}\n"))


def test_write_timeout(tmp_path: Path) -> None:
    assert load(None).write_timeout == 30.0
    assert load(write(tmp_path, "[server]\nwrite_timeout = 5\n")).write_timeout == 5
    for bad in ("0", "-2", "3601", '"later"'):
        with pytest.raises(ConfigError, match="write_timeout"):
            load(write(tmp_path, f"[server]\nwrite_timeout = {bad}\n"))
