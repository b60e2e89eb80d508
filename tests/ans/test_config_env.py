"""Configuration from ANS_<SECTION>__<KEY> environment variables, and `ans config show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ans.config import ConfigError, load, load_with_origin
from ans.config_env import env_table, parse_value, redact


def test_values_are_toml_when_they_parse_and_strings_otherwise() -> None:
    assert parse_value("true") is True
    assert parse_value("0.25") == 0.25
    assert parse_value('["a", "b"]') == ["a", "b"]
    assert parse_value("127.0.0.1:4480") == "127.0.0.1:4480"
    assert parse_value("/var/lib/ans") == "/var/lib/ans"
    assert parse_value('"10"') == "10"


def test_env_table_nests_sections_and_ignores_other_variables() -> None:
    doc = env_table(
        {
            "ANS_SERVER__LISTEN": "0.0.0.0:9000",
            "ANS_RATE_LIMIT__ENABLED": "false",
            "ANS_SERVER": "http://client-default:4480",  # the client's, not config
            "HOME": "/root",
        }
    )
    assert doc["server"]["listen"] == "0.0.0.0:9000"
    assert doc["rate_limit"]["enabled"] is False
    assert doc["server"]["__origin__"] == {"listen": "ANS_SERVER__LISTEN"}
    assert set(doc) == {"server", "rate_limit"}


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = tmp_path / "ans.toml"
    f.write_text(
        '[server]\nlisten = "127.0.0.1:1111"\n[discovery]\ndefault_limit = 7\nmax_limit = 50\n'
    )
    env = {"ANS_SERVER__LISTEN": "127.0.0.1:2222", "ANS_DISCOVERY__MAX_LIMIT": "60"}
    assert load(None, environ={}).listen == "127.0.0.1:4480"  # default
    assert load(f, environ={}).listen == "127.0.0.1:1111"  # file
    cfg = load(f, environ=env)
    assert cfg.listen == "127.0.0.1:2222"  # env over file
    assert cfg.max_limit == 60 and cfg.default_limit == 7  # keys merge per key
    assert load(f, environ=env, listen="127.0.0.1:3333").listen == "127.0.0.1:3333"  # flag
    _, origin = load_with_origin(f, environ=env)
    assert origin[("server", "listen")] == "ANS_SERVER__LISTEN"
    assert origin[("discovery", "default_limit")] == f"file {f}"


def test_tables_and_paths_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load(
        None,
        environ={
            "ANS_RATE_LIMIT__RATE": "5",
            "ANS_ANS__DATA_DIR": "state",
            "ANS_FEDERATION__PEERS": '[{url = "https://peer.example", tier = 2}]',
        },
    )
    assert cfg.rate_limit.rate == 5
    assert cfg.data_dir == tmp_path / "state"  # relative to the working directory
    assert [(p.url, p.tier) for p in cfg.peers] == [("https://peer.example", 2)]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ANS_SERVER__NOPE": "1"}, "unknown key 'nope' in [server] (set by ANS_SERVER__NOPE)"),
        ({"ANS_SERVR__LISTEN": "x"}, "unknown config section [servr] (set by ANS_SERVR__LISTEN)"),
        ({"ANS_DISCOVERY__MAX_LIMIT": "many"}, "max_limit"),
        ({"ANS___LISTEN": "x"}, "expected ANS_<SECTION>__<KEY>"),
    ],
)
def test_bad_variables_are_configuration_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(None, environ=env)
    assert message in str(err.value)


def test_redaction() -> None:
    assert redact("webhook_secret", "s3cr3t") == "<redacted>"
    assert (
        redact("store", "postgresql://ans:pw@db:5432/ans")
        == "postgresql://ans:<redacted>@db:5432/ans"
    )
    assert redact("listen", "127.0.0.1:4480") == "127.0.0.1:4480"


def test_config_show_cli_prints_effective_values_with_their_origin(tmp_path: Path) -> None:
    f = tmp_path / "ans.toml"
    f.write_text("[discovery]\ndefault_limit = 7\n")
    env = {"ANS_SERVER__LISTEN": "127.0.0.1:2222", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "ans.cli", "config", "show", "--config", str(f)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'listen = "127.0.0.1:2222"  # ANS_SERVER__LISTEN' in out
    assert f"default_limit = 7  # file {f}" in out
    assert "max_limit = 100  # default" in out
    bad = subprocess.run(
        [sys.executable, "-m", "ans.cli", "config", "show"],
        env={**env, "ANS_SERVER__NOPE": "1"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0  # one line
    assert "ANS_SERVER__NOPE" in bad.stderr
