"""The socket ``llmsys serve`` listens on, bound before the model is loaded: a bad ``--host`` / ``--port`` is one line.

Bound as uvicorn binds it (``uvicorn.Config.bind_socket``: IPv6 when the host holds a colon, ``SO_REUSEADDR`` so a
port left in TIME_WAIT by a stopped server is reused, while one another socket listens on is refused) and handed to
the server (``uvicorn.Server.run(sockets=[...])``), so the port checked is the port served: nothing can take it
in between.
"""

from __future__ import annotations

import errno
import socket

PORTS = range(1, 65536)


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening; ValueError naming --host / --port when it cannot be."""
    if port not in PORTS:
        raise ValueError(f"--port {port}: choose a TCP port from 1 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except socket.gaierror as err:
        sock.close()
        raise ValueError(f"--host {host}: not an address or a name this machine resolves ({err.strerror})") from None
    except OSError as err:
        sock.close()
        raise ValueError(_bind_error(host, port, err)) from None
    sock.set_inheritable(True)
    return sock


def _bind_error(host: str, port: int, err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return f"--port {port}: already in use on {host} (another server listens there); choose another --port"
    if err.errno == errno.EACCES:
        return f"--port {port}: permission denied on {host} (ports below 1024 need root); choose a --port >= 1024"
    if err.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine; use 127.0.0.1 (this machine) or 0.0.0.0 (all)"
    return f"--host {host} --port {port}: cannot listen there ({err.strerror})"
