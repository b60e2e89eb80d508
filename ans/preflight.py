"""Checks ``ans serve`` makes before any start-up work, so that a mistake an
operator meets (a mistyped data directory, a missing certificate, a port in
use, a registry it cannot read) is one clear line naming the file or the
address, not a traceback after a minute of index loading. Each raises
:class:`~ans.config.ConfigError`.
"""

from __future__ import annotations

import socket
from pathlib import Path

from .config import Config, ConfigError


def check_data_dir(data: Path) -> None:
    """The data directory exists, or its parent does (it is then created:
    a mistyped path must not silently become a fresh registry with a new
    signing key somewhere unexpected)."""
    if data.exists():
        if not data.is_dir():
            raise ConfigError(f"data directory {data} is a file, not a directory")
        return
    if not data.parent.is_dir():
        raise ConfigError(
            f"data directory {data} does not exist, nor does its parent {data.parent}; "
            "check --data-dir (only a missing last component is created)"
        )


def check_files(config: Config) -> None:
    """The TLS certificate, key and client CA files are readable files."""
    for what, path in (
        ("tls_certfile", config.tls_certfile),
        ("tls_keyfile", config.tls_keyfile),
        ("tls_client_ca", config.tls_client_ca if config.auth_mode == "mtls" else None),
    ):
        if path is None:
            continue
        if not Path(path).is_file():
            raise ConfigError(f"{what} {path}: no such file")
        try:
            Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from None


def check_port(host: str, port: int, what: str) -> None:
    """``host:port`` can be bound now (port 0 always can)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        shown = f"[{host}]" if ":" in host else host
        raise ConfigError(
            f"cannot listen on {shown}:{port} ({what}): {exc.strerror or exc}"
        ) from None


def check_serve(config: Config) -> None:
    """Everything :func:`check_data_dir`, :func:`check_files` and
    :func:`check_port` check, for ``ans serve`` with ``config``."""
    check_data_dir(config.data_dir)
    check_files(config)
    check_port(*config.host_port, "--listen")
    if config.native_host_port is not None:
        check_port(*config.native_host_port, "--native-listen")
