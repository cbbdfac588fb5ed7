"""A TCP fault proxy: forwards connections, and on command stalls, delays or resets them.

``python tests/faults/faultproxy.py --listen HOST:PORT --to HOST:PORT --control HOST:PORT``

The control port takes one command a line and answers ``ok`` (``tc netem`` is not
available on these kernels, so this is how a link stalls or slows):

* ``stall``: hold every byte in both directions (connections stay open, as on a link
  that hangs); ``flow``: forward again, held bytes first.
* ``delay S``: wait S seconds before forwarding each chunk (0: none).
* ``reset``: reset every open connection now (RST to both sides).
* ``reset-every S``: reset every open connection each S seconds (0: stop).
* ``stats``: ``connections=N resets=N``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct


class Proxy:
    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.delay_s = 0.0
        self.conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.resets = 0
        self._reset_task: asyncio.Task[None] | None = None

    async def serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        pair = (writer, up_writer)
        self.conns.add(pair)
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            self.conns.discard(pair)
            for w in pair:
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if writer.can_write_eof() and not writer.is_closing():
                try:
                    writer.write_eof()
                except OSError:
                    pass

    def reset_all(self) -> None:
        for pair in list(self.conns):
            for w in pair:
                sock = w.get_extra_info("socket")
                if sock is not None:  # linger 0: close sends RST, not FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()
            self.conns.discard(pair)
            self.resets += 1

    async def _reset_every(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.reset_all()

    def command(self, line: str) -> str:
        word, _, arg = line.strip().partition(" ")
        if word == "stall":
            self.flowing.clear()
        elif word == "flow":
            self.flowing.set()
        elif word == "delay":
            self.delay_s = float(arg)
        elif word == "reset":
            self.reset_all()
        elif word == "reset-every":
            if self._reset_task:
                self._reset_task.cancel()
                self._reset_task = None
            if float(arg) > 0:
                self._reset_task = asyncio.ensure_future(self._reset_every(float(arg)))
        elif word == "stats":
            return f"connections={len(self.conns)} resets={self.resets}"
        else:
            return f"error: unknown command {word!r}"
        return "ok"

    async def serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write((self.command(line.decode()) + "\n").encode())
            await writer.drain()
        writer.close()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(listen: tuple[str, int], to: tuple[str, int], control: tuple[str, int]) -> None:
    proxy = Proxy(to)
    data = await asyncio.start_server(proxy.serve_client, *listen)
    ctl = await asyncio.start_server(proxy.serve_control, *control)
    print(f"proxy {listen[0]}:{listen[1]} -> {to[0]}:{to[1]}, control on {control[1]}", flush=True)
    async with data, ctl:
        await asyncio.gather(data.serve_forever(), ctl.serve_forever())


def control(addr: tuple[str, int], *commands: str) -> list[str]:
    """Send commands to a proxy's control port; returns its answers."""
    with socket.create_connection(addr, timeout=5) as s:
        f = s.makefile("rw")
        answers = []
        for c in commands:
            f.write(c + "\n")
            f.flush()
            answers.append(f.readline().strip())
        return answers


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=_addr, required=True)
    p.add_argument("--to", type=_addr, required=True)
    p.add_argument("--control", type=_addr, required=True)
    a = p.parse_args()
    asyncio.run(main(a.listen, a.to, a.control))
