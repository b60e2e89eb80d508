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
        max_hops=3, peer_timeout=1.5, deadline=2.5, key_ttl=600.0
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
