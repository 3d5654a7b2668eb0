#!/usr/bin/env python3
"""A SOCKS5 proxy for tests (RFC 1928, CONNECT only, no authentication), on 127.0.0.1.

Writes its port to --port-file once listening and one line per CONNECT to --log
("CONNECT host:port", the host as the client sent it: a name when the client let the proxy
resolve it, as socks5h:// does). Serves until killed. Debian has no SOCKS server that runs
unprivileged without a configuration of its system's, so scripts/e2e-network uses this one.
"""
import argparse
import asyncio
import ipaddress
import socket


def close(writer):
    try:
        writer.close()
    except Exception:
        pass


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        close(writer)


async def handle(reader, writer, log):
    try:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        if version != 5 or 0 not in methods:
            writer.write(b"\x05\xff")
            return
        writer.write(b"\x05\x00")
        version, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 3:
            length = (await reader.readexactly(1))[0]
            host = (await reader.readexactly(length)).decode("ascii", "replace")
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        else:
            return
        port = int.from_bytes(await reader.readexactly(2), "big")
        if version != 5 or command != 1:
            writer.write(b"\x05\x07\x00\x01" + bytes(6))
            return
        with open(log, "a") as f:
            f.write(f"CONNECT {host}:{port}\n")
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.write(b"\x05\x05\x00\x01" + bytes(6))
            return
        writer.write(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + (0).to_bytes(2, "big"))
        await writer.drain()
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        close(writer)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(lambda r, w: handle(r, w, args.log), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write(f"{port}\n")
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
