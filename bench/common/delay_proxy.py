"""A TCP proxy that holds every chunk for a fixed time each way: a database at network
distance on one machine (a managed PostgreSQL in the same region is ~0.2-1 ms away).
At the default 0.1 ms each way, `SELECT 1` takes ~0.5 ms through it on an idle 2-core
machine (0.08-0.14 ms on the loopback); more when the cores are busy. Round trips a
request makes cost about what they cost in such a deployment; CPU and bandwidth are
the machine's own.

    python -m bench.common.delay_proxy --listen 6432 --to 127.0.0.1:5432 --one-way-ms 0.1
    REFLEXA_BENCH_PG_URL=postgresql+psycopg://postgres@127.0.0.1:6432/postgres \\
        python -m bench.retrieval.stages --backend postgres

Each direction of a connection has a reader thread, which stamps each chunk with
when it may leave, and a writer thread, which sends the chunks in order once their
time has come (`time.sleep` here, not an event loop's timers, whose timeouts are
whole milliseconds). Order within a direction is kept; no chunk waits for another
beyond its own delay.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import threading
import time


def _pump(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def send() -> None:
        try:
            while True:
                due, data = chunks.get()
                if not data:
                    break
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)

    writer = threading.Thread(target=send, daemon=True)
    writer.start()
    try:
        while data := src.recv(1 << 16):
            chunks.put((time.perf_counter() + delay_s, data))
    except OSError:
        pass
    finally:
        chunks.put((0.0, b""))


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the other side went first
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _connection(client: socket.socket, target: tuple[str, int], delay_s: float) -> None:
    try:
        upstream = socket.create_connection(target)
    except OSError:
        _close(client)
        return
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=_pump, args=(client, upstream, delay_s), daemon=True).start()
    threading.Thread(target=_pump, args=(upstream, client, delay_s), daemon=True).start()


def listen(port: int) -> socket.socket:
    """The proxy's listening socket on the loopback (port 0: any free one)."""
    return socket.create_server(("127.0.0.1", port))


def serve(server: socket.socket, target: tuple[str, int], one_way_ms: float) -> None:
    """Accept connections on `server` until it is closed, each one proxied to `target`."""
    while True:
        try:
            client, _ = server.accept()
        except OSError:  # closed
            return
        _connection(client, target, one_way_ms / 1000.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.common.delay_proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, default=6432)
    parser.add_argument("--to", default="127.0.0.1:5432", help="host:port")
    parser.add_argument("--one-way-ms", type=float, default=0.1)
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    server = listen(args.listen)
    print(f"proxying 127.0.0.1:{args.listen} -> {args.to}, {args.one_way_ms} ms each way", flush=True)
    serve(server, (host, int(port)), args.one_way_ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
