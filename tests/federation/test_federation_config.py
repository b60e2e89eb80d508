"""Peers in configuration: ``--peer TIER@URL`` and ``[federation]`` in TOML."""

from __future__ import annotations

from pathlib import Path

import pytest
from ans.federation.peers import FederationSettings, Peer, PeerConfigError, parse_peer_flag

from ans.cli import main
from ans.config import ConfigError, load


def test_peer_flag() -> None:
    p = parse_peer_flag("2@http://127.0.0.1:4481/")
    assert p == Peer(url="http://127.0.0.1:4481", tier=2)
    assert p.key_url == "http://127.0.0.1:4481/.well-known/jwks.json"
    assert p.key_source == "jwks_url" and p.name == "http://127.0.0.1:4481"


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:4481",
        "4@http://a",
        "0@http://a",
        "x@http://a",
        "2@ftp://a",
        "2@http://",
        "2@http://user:pw@a",
        "2@http://a/?q=1",
    ],
)
def test_bad_peer_flag(text: str) -> None:
    with pytest.raises(PeerConfigError):
        parse_peer_flag(text)


def test_toml_federation_section(tmp_path: Path) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text(
        """
[federation]
max_hops = 3
peer_timeout = 1.5
deadline = 2.5
key_ttl = 600
failures_before_skip = 5
skip_seconds = 2
max_skip_seconds = 30.5

[[federation.peers]]
url = "https://ans.partner.example"
tier = 2
zones = ["zone:finance"]
timeout = 0.75
cacert = "partner-ca.pem"

[[federation.peers]]
url = "http://10.0.0.7:4480"
tier = 3
jwks_file = "peer.jwks.json"

[[federation.peers]]
url = "http://10.0.0.8:4480"
tier = 1
describe = true
"""
    )
    cfg = load(cfg_file, peers=(parse_peer_flag("2@http://127.0.0.1:9"),))
    assert cfg.federation == FederationSettings(
        max_hops=3,
        peer_timeout=1.5,
        deadline=2.5,
        key_ttl=600.0,
        failures_before_skip=5,
        skip_seconds=2.0,
        max_skip_seconds=30.5,
    )
    first, second, third, flag = cfg.peers
    assert first.zones == ("zone:finance",) and first.timeout == 0.75
    assert first.cacert == tmp_path / "partner-ca.pem"
    assert first.key_url == "https://ans.partner.example/.well-known/jwks.json"
    assert second.key_source == "jwks_file" and second.jwks_file == tmp_path / "peer.jwks.json"
    assert third.key_source == "describe" and third.tier == 1
    assert flag.url == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[federation]\nmax_hops = 9\n", "max_hops"),
        ("[federation]\ndeadline = 0\n", "deadline"),
        ("[federation]\nbogus = 1\n", "bogus"),
        ('[federation]\npeer_timeout = "1"\n', "number"),
        ("[federation]\nfailures_before_skip = 2.5\n", "failures_before_skip must be an integer"),
        ("[federation]\nfailures_before_skip = -1\n", "failures_before_skip must be 0..100"),
        ("[federation]\nskip_seconds = 0.01\n", "skip_seconds must be"),
        ("[federation]\nskip_seconds = 10\nmax_skip_seconds = 5\n", "max_skip_seconds must be"),
        ('[[federation.peers]]\nurl = "http://a"\n', "tier"),
        ('[[federation.peers]]\nurl = "http://a"\ntier = 2\ncolour = "red"\n', "colour"),
        (
            '[[federation.peers]]\nurl = "http://a"\ntier = 2\n'
            'jwks_file = "f"\njwks_url = "http://a/k"\n',
            "one of",
        ),
        ('[[federation.peers]]\nurl = "http://a"\ntier = 2\nzones = ["finance"]\n', "zone"),
        (
            '[[federation.peers]]\nurl = "http://a"\ntier = 2\n'
            '[[federation.peers]]\nurl = "http://a"\ntier = 3\n',
            "twice",
        ),
    ],
)
def test_bad_federation_config(tmp_path: Path, body: str, message: str) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load(cfg_file)


def test_serve_rejects_a_bad_peer_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--peer", "9@http://127.0.0.1:1"]) == 2
    assert "peer tier must be 1, 2 or 3" in capsys.readouterr().err


# -- native AGTP peers (agtp://, agtp+cleartext://) ---------------------------------------


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("2@agtp+cleartext://127.0.0.1:4491", "agtp+cleartext://127.0.0.1:4491"),
        ("1@agtp://ans.partner.example/", "agtp://ans.partner.example"),
        ("3@agtp://ans.partner.example:8443", "agtp://ans.partner.example:8443"),
    ],
)
def test_native_peer_flag_takes_its_key_from_describe(text: str, url: str) -> None:
    p = parse_peer_flag(text)
    assert p.url == url and p.native
    assert p.key_source == "describe" and p.jwks_url is None and p.jwks_file is None
    assert p.tier == int(text[0])


def test_http_peer_flag_is_not_native() -> None:
    for text in ("2@http://127.0.0.1:4481", "2@https://ans.example"):
        p = parse_peer_flag(text)
        assert not p.native and p.key_source == "jwks_url"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2@agtp+cleartext://127.0.0.1:4491/ans", "no path"),
        ("2@agtp://ans.example/agents/x", "no path"),
        ("2@ftp://127.0.0.1:21", "agtp"),
        ("2@agtp+tls://127.0.0.1:1", "agtp"),
        ("2@agtp://", "agtp"),
        ("2@agtp://a:99999", "invalid port"),
        ("2@agtp://user@a", "credentials"),
    ],
)
def test_bad_native_peer_flag(text: str, message: str) -> None:
    with pytest.raises(PeerConfigError, match=message):
        parse_peer_flag(text)


def test_toml_native_peers(tmp_path: Path) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text(
        """
[[federation.peers]]
url = "agtp+cleartext://127.0.0.1:4491"
tier = 2

[[federation.peers]]
url = "agtp://ans.partner.example"
tier = 1
jwks_url = "https://ans.partner.example/.well-known/jwks.json"
cacert = "partner-ca.pem"

[[federation.peers]]
url = "agtp://ans.other.example:9443/"
tier = 3
jwks_file = "other.jwks.json"
"""
    )
    plain, pinned_url, pinned_file = load(cfg_file).peers
    assert plain.native and plain.key_source == "describe" and plain.jwks_url is None
    assert pinned_url.key_source == "jwks_url"
    assert pinned_url.key_url == "https://ans.partner.example/.well-known/jwks.json"
    assert pinned_url.cacert == tmp_path / "partner-ca.pem"
    assert pinned_file.url == "agtp://ans.other.example:9443"
    assert pinned_file.key_source == "jwks_file"
    assert pinned_file.jwks_file == tmp_path / "other.jwks.json"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[federation.peers]]\nurl = "agtp://a/ans"\ntier = 2\n', "no path"),
        ('[[federation.peers]]\nurl = "ftp://a"\ntier = 2\n', "agtp"),
        (
            '[[federation.peers]]\nurl = "agtp://a"\ntier = 2\n'
            'jwks_url = "agtp://a/.well-known/jwks.json"\n',
            "jwks_url must be an http",
        ),
        (
            '[[federation.peers]]\nurl = "agtp://a"\ntier = 2\ndescribe = true\n'
            'jwks_file = "f.json"\n',
            "one of",
        ),
    ],
)
def test_bad_native_peer_in_toml(tmp_path: Path, body: str, message: str) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load(cfg_file)


def test_native_listen_setting(tmp_path: Path) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text('[server]\nnative_listen = "127.0.0.1:4491"\n')
    assert load(cfg_file).native_host_port == ("127.0.0.1", 4491)
    assert load(None).native_host_port is None  # off unless asked for
    cfg_file.write_text('[server]\nnative_listen = "127.0.0.1:http"\n')
    with pytest.raises(ConfigError, match="native_listen"):
        load(cfg_file)


def test_peer_client_certificate(tmp_path: Path, tls_cert: tuple[Path, Path]) -> None:
    cert, key = tls_cert
    cfg_file = tmp_path / "ans.toml"
    peer = '[[federation.peers]]\nurl = "{url}"\ntier = 2\n'
    pair = f'client_cert = "{cert.name}"\nclient_key = "{key.name}"\n'  # relative to the file
    cfg_file.write_text(peer.format(url="https://a") + pair)
    loaded = load(cfg_file).peers[0]
    assert (loaded.client_cert, loaded.client_key) == (cert, key)
    assert loaded.tls_client == (str(cert), str(key))
    cfg_file.write_text(peer.format(url="agtp://a:4490") + pair)
    assert load(cfg_file).peers[0].tls_client == (str(cert), str(key))
    bad = {
        peer.format(url="https://a") + f'client_cert = "{cert}"\n': "go together",
        peer.format(url="http://a") + pair: "needs a TLS peer",
        peer.format(url="agtp+cleartext://a:1") + pair: "needs a TLS peer",
        peer.format(url="https://a") + f'client_cert = "{key}"\nclient_key = "{key}"\n': "load",
        peer.format(url="https://a") + 'client_cert = "nope.pem"\nclient_key = "nope.key"\n': (
            "load"
        ),
        peer.format(url="https://a") + "client_cert = 1\nclient_key = 2\n": "must be a path",
    }
    for body, message in bad.items():
        cfg_file.write_text(body)
        with pytest.raises(ConfigError, match=message):
            load(cfg_file)
    assert parse_peer_flag("2@https://a").tls_client is None
