#!/usr/bin/env python3
"""hmp.py SOCKET COMMAND...: run QEMU human monitor commands through its
unix socket (-monitor unix:SOCKET,server,nowait) and print their output."""
import socket
import sys
import time


def until_prompt(s):
    buf = b""
    end = time.time() + 30
    while not buf.endswith(b"(qemu) ") and time.time() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


def main():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sys.argv[1])
    until_prompt(s)
    for cmd in sys.argv[2:]:
        s.sendall(cmd.encode() + b"\n")
        # the monitor echoes the line with terminal escapes; keep the rest
        out = until_prompt(s).replace("\r", "")
        print("\n".join(out.split("\n")[1:-1]))
    s.close()


if __name__ == "__main__":
    main()
