"""Run inside an environment build's sandbox (etude.tasks.pyenv_build), by the interpreter
running etude in isolated mode (`python -I -c <this file> SOCKET COMMAND…`), so it imports
nothing but the standard library: a listener on the sandbox's own loopback that carries each
connection to the host's index proxy over the unix socket SOCKET (etude.tasks.index_proxy),
then COMMAND with pip pointed at it (`PIP_PROXY`, and the usual proxy variables for what
pip starts). The sandbox has no other network: this is how pip reaches the index, and all
the proxy lets it reach.
"""

import contextlib
import os
import socket
import subprocess
import sys
import threading


def _pump(source, target):
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def splice(a, b):
    """Carry bytes both ways between the sockets `a` and `b` until each side has ended (or
    gone idle). The host's proxy (etude.tasks.index_proxy) imports it from here: this file
    cannot import from etude, so the one copy lives here."""
    other = threading.Thread(target=_pump, args=(b, a), daemon=True)
    other.start()
    _pump(a, b)
    other.join()


def _carry(client, path):
    with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
        try:
            upstream.connect(path)
        except OSError:
            return
        splice(client, upstream)


def _serve(listener, path):
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_carry, args=(client, path), daemon=True).start()


def main(path, command):
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    names = ("PIP_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
    env = {**os.environ, **dict.fromkeys(names, proxy)}
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    sys.exit(subprocess.call(command, env=env))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
