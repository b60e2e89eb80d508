"""Failures a user meets on the command line: each is one clear line on
stderr naming the file or address, a non-zero exit, and no traceback."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey

ANS = str(Path(sys.executable).with_name("ans"))
BAD_JSON = {
    "not-json": b"manifest: yes\n",
    "empty": b"",
    "duplicate-key": b'{"canonical_id": "a", "canonical_id": "b"}',
    "not-utf8": b'{"agent_label": "\xff\xfe"}',
}


def ans(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ANS, *args], capture_output=True, text=True, timeout=timeout)


def one_line_failure(out: subprocess.CompletedProcess[str], *names: str) -> str:
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", list(BAD_JSON))
def test_a_bad_json_file_is_named(tmp_path: Path, kind: str) -> None:
    bad = tmp_path / f"{kind}.json"
    bad.write_bytes(BAD_JSON[kind])
    good = tmp_path / "m.json"
    good.write_text('{"agent_label": "x"}')
    key = tmp_path / "gov.pem"
    SigningKey.generate().save(key)
    server = ("--server", "http://127.0.0.1:9")  # never reached
    one_line_failure(ans("activate", str(bad), *server), str(bad))
    one_line_failure(ans("activate", str(good), "--capabilities", str(bad), *server), str(bad))
    one_line_failure(ans("governance", "sign-manifest", str(bad), "--key", str(key)), str(bad))


def test_a_corrupt_governance_key_is_named(tmp_path: Path) -> None:
    key = tmp_path / "gov.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n")
    manifest = tmp_path / "m.json"
    manifest.write_text('{"agent_label": "x"}')
    one_line_failure(ans("governance", "sign-manifest", str(manifest), "--key", str(key)), str(key))
    one_line_failure(
        ans(
            "lifecycle",
            "suspend",
            "cid",
            "--governance-key",
            str(key),
            "--server",
            "http://127.0.0.1:9",
        ),
        str(key),
    )


def serve(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return ans("serve", "--data-dir", str(data), "--listen", "127.0.0.1:0", *extra)


def test_serve_refuses_a_registry_it_cannot_read(tmp_path: Path) -> None:
    newer = tmp_path / "newer"
    newer.mkdir()
    db = sqlite3.connect(newer / "registry.sqlite3")
    db.execute("PRAGMA user_version = 99")
    db.close()
    one_line_failure(serve(newer), str(newer / "registry.sqlite3"), "newer")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "registry.sqlite3").write_bytes(b"this is not a database" * 100)
    one_line_failure(serve(corrupt), str(corrupt / "registry.sqlite3"))


def test_serve_names_a_corrupt_signing_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "ans-signing-key.pem").write_text("garbage")
    one_line_failure(serve(data), str(data / "ans-signing-key.pem"))


def test_serve_checks_paths_and_port_before_starting(tmp_path: Path) -> None:
    # a data dir that is a file
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line_failure(serve(afile), str(afile), "is a file")
    # a mistyped data dir (its parent does not exist either) creates nothing
    typo = tmp_path / "no-such-parent" / "data"
    one_line_failure(serve(typo), str(typo))
    assert not typo.parent.exists()
    # a missing TLS certificate, named, and no "listening on https://" first
    cfg = tmp_path / "tls.toml"
    cfg.write_text(
        f'[server]\ntls_certfile = "{tmp_path / "cert.pem"}"\n'
        f'tls_keyfile = "{tmp_path / "key.pem"}"\n'
    )
    out = serve(tmp_path / "d1", "--config", str(cfg))
    one_line_failure(out, str(tmp_path / "cert.pem"))
    assert "listening" not in out.stdout
    # a port in use, named, before any start-up work (no registry created)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        data = tmp_path / "d2"
        out = ans("serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}")
    one_line_failure(out, f"127.0.0.1:{port}")
    assert not (data / "registry.sqlite3").exists()


def test_import_checks_the_data_dir_first(tmp_path: Path) -> None:
    lines = tmp_path / "agents.jsonl"
    lines.write_text('{"manifest": {}}\n')
    # a mistyped data dir (its parent does not exist either) creates nothing
    typo = tmp_path / "no-such-parent" / "data"
    one_line_failure(ans("import", str(lines), "--data-dir", str(typo)), str(typo), "--data-dir")
    assert not typo.parent.exists()
    # a data dir that is a file
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line_failure(ans("import", str(lines), "--data-dir", str(afile)), str(afile), "is a file")


def test_a_new_signing_key_is_announced(tmp_path: Path, server_factory: Any) -> None:
    srv = server_factory(tmp_path / "fresh")
    assert any("NEW ANS signing key generated" in line for line in srv.output)


def test_discover_json_keeps_stdout_json_and_a_closed_pipe_is_quiet(server: Any) -> None:
    out = ans("discover", "audit Solidity smart contracts", "--server", server.url, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == 200  # nothing else on stdout
    assert "signature: verified" in out.stderr
    # the reader is gone before anything is written: as `| head` leaves it
    proc = subprocess.Popen(
        [ANS, "discover", "audit Solidity smart contracts", "--server", server.url, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert "Broken pipe" not in err and "Traceback" not in err, err
    assert "BrokenPipeError" not in err


def test_bad_flags_are_named_on_one_line(tmp_path: Path) -> None:
    """A missing CA bundle is named (it was reported as the server being
    unreachable), a timeout must be above 0, and argparse's usage errors are
    one line too."""
    server = ("--server", "http://127.0.0.1:9")  # never reached
    missing = str(tmp_path / "no-such-ca.pem")
    line = one_line_failure(ans("discover", "x", *server, "--cacert", missing), missing)
    assert "--cacert" in line and "cannot reach" not in line
    for value in ("0", "-1", "nan"):
        line = one_line_failure(ans("discover", "x", *server, "--timeout", value), "--timeout")
        assert "cannot reach" not in line
    one_line_failure(ans("discover", "x", "--limit", "many"), "--limit", "ans discover --help")
    one_line_failure(ans("no-such-command"), "no-such-command")
    assert ans("discover", "x", *server, "--timeout", "0").returncode == 2
