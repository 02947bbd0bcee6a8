"""
Servers and probes for the NetworkPolicy truth tables, one process per pod.

serve PORT...              TCP and UDP echo servers on every port, IPv4 and IPv6, until killed:
                           each TCP connection and each UDP datagram is answered "ok".
probe TIMEOUT TARGET...    tries every TARGET ("HOST PORT tcp|udp", as one argument each) at
                           once and prints one line per target, in the order given:
                           "HOST PORT PROTO yes|no". "yes": a connection answered (TCP) or
                           a reply came back (UDP) within TIMEOUT seconds.
"""
import selectors
import socket
import sys
import threading


def serve(ports):
    socks = []
    for port in ports:
        for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            t = socket.socket(family, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            t.bind((host, port))
            t.listen(128)
            t.setblocking(False)
            u = socket.socket(family, socket.SOCK_DGRAM)
            if family == socket.AF_INET6:
                u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            u.bind((host, port))
            u.setblocking(False)
            socks += [t, u]
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            try:
                if s.type == socket.SOCK_STREAM:
                    conn, _ = s.accept()
                    conn.setblocking(True)
                    conn.settimeout(1)
                    try:
                        conn.sendall(b"ok\n")
                    finally:
                        conn.close()
                else:
                    data, peer = s.recvfrom(2048)
                    s.sendto(b"ok\n", peer)
            except OSError:
                pass


def try_one(host, port, proto, timeout, out, i):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(family, kind)
    s.settimeout(timeout)
    ok = False
    try:
        if proto == "tcp":
            s.connect((host, port))
            ok = s.recv(16).startswith(b"ok")
        else:
            s.sendto(b"hi", (host, port))
            data, _ = s.recvfrom(16)
            ok = data.startswith(b"ok")
    except OSError:
        ok = False
    finally:
        s.close()
    out[i] = ok


def probe(timeout, targets):
    parsed = [t.split() for t in targets]
    out = [False] * len(parsed)
    threads = [
        threading.Thread(target=try_one, args=(h, int(p), proto, timeout, out, i))
        for i, (h, p, proto) in enumerate(parsed)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (h, p, proto), ok in zip(parsed, out):
        print(h, p, proto, "yes" if ok else "no")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve([int(p) for p in sys.argv[2:]])
    else:
        probe(float(sys.argv[2]), sys.argv[3:])
