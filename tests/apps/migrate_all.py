#!/usr/bin/env python3
"""migrate_all.py SOCKET=URI...: start a migration on every QEMU monitor
socket at once (HMP "migrate -d URI" written to every monitor before any
reply is read: a source's monitor answers only once its RDMA connection is
up, which took ~750 ms on a loaded machine, longer than another migration
lasted), then poll "info migrate" on all of them every
50 ms until each has ended. Prints each one's final status, the times it
was first and last seen active, and how many poll rounds saw all of them
active at the same time; exits 0 when all completed."""
import sys
import time

from hmp import until_prompt
import socket


def cmd(s, line):
    s.sendall(line.encode() + b"\n")
    out = until_prompt(s).replace("\r", "")
    return "\n".join(out.split("\n")[1:-1])


def status(text):
    for l in text.split("\n"):
        if l.startswith("Migration status: "):
            return l.split(": ", 1)[1].strip()
    return "none"


def main():
    mons = []
    for arg in sys.argv[1:]:
        path, uri = arg.split("=", 1)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(path)
        until_prompt(s)
        mons.append((s, uri))
    t0 = time.monotonic()
    for s, uri in mons:
        s.sendall(("migrate -d " + uri + "\n").encode())
    for s, _ in mons:
        until_prompt(s)
    first = [None] * len(mons)
    last = [None] * len(mons)
    final = [None] * len(mons)
    together = 0.0
    rounds = 0
    prev = None
    deadline = t0 + 60
    while None in final and time.monotonic() < deadline:
        now = time.monotonic() - t0
        n_active = 0
        for i, (s, _) in enumerate(mons):
            if final[i]:
                continue
            st = status(cmd(s, "info migrate"))
            if st in ("completed", "failed", "cancelled"):
                final[i] = st
            elif st in ("active", "setup", "device"):
                n_active += 1
                first[i] = now if first[i] is None else first[i]
                last[i] = now
        if n_active == len(mons):
            rounds += 1
            if prev is not None:
                together += now - prev
        prev = now if n_active == len(mons) else None
        time.sleep(0.05)
    for i, (s, uri) in enumerate(mons):
        f = "-" if first[i] is None else "%.0f" % (first[i] * 1000)
        l = "-" if last[i] is None else "%.0f" % (last[i] * 1000)
        print("migration %d to %s: %s, seen active %s..%s ms" % (i + 1, uri, final[i], f, l))
        s.close()
    print("polls that saw all %d active: %d (together for %.0f ms between such polls)"
          % (len(mons), rounds, together * 1000))
    sys.exit(0 if all(f == "completed" for f in final) else 1)


if __name__ == "__main__":
    main()
