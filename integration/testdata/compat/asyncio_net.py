"""asyncio: a loopback TCP echo server and client, create_subprocess_exec, run_in_executor, timeouts."""
import asyncio
import sys


async def handle(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            break
        writer.write(line.upper())
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def client(port, words):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for w in words:
        writer.write(w.encode() + b"\n")
        await writer.drain()
        out.append((await reader.readline()).decode().strip())
    writer.close()
    await writer.wait_closed()
    return out


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    results = await asyncio.gather(*(client(port, [f"c{i}-a", f"c{i}-b"]) for i in range(5)))
    print("echo", results)
    server.close()
    await server.wait_closed()

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; print(sum(map(int, sys.stdin.read().split())))",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate(b"1 2 3 4")
    print("subprocess", out.decode().strip(), proc.returncode)

    loop = asyncio.get_running_loop()
    print("executor", await loop.run_in_executor(None, sum, range(100)))

    try:
        await asyncio.wait_for(asyncio.sleep(10), timeout=0.05)
    except asyncio.TimeoutError:
        print("timeout")

    q = asyncio.Queue()

    async def producer():
        for i in range(5):
            await q.put(i)
        await q.put(None)

    async def consumer():
        total = 0
        while (item := await q.get()) is not None:
            total += item
        return total

    _, total = await asyncio.gather(producer(), consumer())
    print("queue", total)

    # Unix-domain stream server in /tmp.
    import os
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "sock")
    userver = await asyncio.start_unix_server(handle, path)
    r, w = await asyncio.open_unix_connection(path)
    w.write(b"unix\n")
    print("unix", (await r.readline()).decode().strip())
    w.close()
    await w.wait_closed()
    userver.close()
    await userver.wait_closed()
    os.unlink(path)


asyncio.run(main())
