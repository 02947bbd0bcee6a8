"""
Servers and probes for the NetworkPolicy tests, one process per pod.

serve PORT...              TCP and UDP echo servers on every port, IPv4 and IPv6, until killed:
                           each TCP connection and each UDP datagram is answered "ok"; a UDP
                           datagram starting "big" is answered with "ok" and BIG_REPLY bytes
                           in all (fragmented on the way, as a DNS answer with EDNS is). SCTP
                           too where the kernel has it (one-to-one sockets: each association
                           answered "ok"); where it has not, none, and nothing said.
probe TIMEOUT TARGET...    tries every TARGET ("HOST PORT tcp|udp|sctp [sport=N] [size=N]", as
                           one argument each) at once and prints one line per target, in the
                           order given: "HOST PORT PROTO yes|no". "yes": a connection or an
                           association answered (TCP, SCTP) or a reply came back (UDP; a whole
                           BIG_REPLY one for a datagram of size=N, which starts "big") within
                           TIMEOUT seconds. sport=N sends from that source port (TCP closes with
                           a reset, SCTP with an ABORT, so the port is free again at once and
                           no TIME_WAIT keeps the 5-tuple).
sctp                       exits 0 when this kernel opens SCTP sockets of both families (the
                           module loaded, or built in), 1 when not.
hold HOST                  one TCP connection to the server's HOLD_PORT (82) that stays open:
                           each line on stdin is sent, and "ok" or "lost" printed as its echo
                           comes back within 2 s or not.
nd-send DST PAYLOAD        sends ICMPv6 neighbour solicitations (type 135, hop limit 255) to DST
                           from the pod's global address, PAYLOAD after the target address:
                           what a covert channel through neighbour discovery would send.
nd-listen                  prints "ready", then every ICMPv6 packet of types 133-137 received
                           (raw socket: before the kernel's own checks), one line of its
                           payload's printable text each, until killed.
"""
import errno
import selectors
import socket
import struct
import sys
import threading
import time

BIG_REPLY = 4000
# Connections to this port stay open and echo what they are sent (`hold`).
HOLD_PORT = 82


FAMILIES = ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::"))


def bound(sock, family, host, port, backlog=None):
    """`sock` bound to `port` of its family alone, listening when given a backlog, non-blocking."""
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if backlog is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    if backlog is not None:
        sock.listen(backlog)
    sock.setblocking(False)
    return sock


def serve(ports):
    socks = []
    for port in ports:
        if port == HOLD_PORT:
            raise SystemExit(f"port {HOLD_PORT} is the held connections'")
        for family, host in FAMILIES:
            socks.append(bound(socket.socket(family, socket.SOCK_STREAM), family, host, port, 128))
            socks.append(bound(socket.socket(family, socket.SOCK_DGRAM), family, host, port))
            s = sctp_socket(family)
            if s is not None:
                socks.append(bound(s, family, host, port, 128))
    for family, host in FAMILIES:
        socks.append(bound(socket.socket(family, socket.SOCK_STREAM), family, host, HOLD_PORT, 16))
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            try:
                if s.type == socket.SOCK_STREAM and s.getsockname()[1] == HOLD_PORT:
                    conn, _ = s.accept()
                    threading.Thread(target=echo_lines, args=(conn,), daemon=True).start()
                elif s.type == socket.SOCK_STREAM:
                    conn, _ = s.accept()
                    conn.setblocking(True)
                    conn.settimeout(1)
                    try:
                        conn.sendall(b"ok\n")
                    finally:
                        conn.close()
                else:
                    data, peer = s.recvfrom(65536)
                    s.sendto(b"ok\n" + b"." * (BIG_REPLY - 3) if data.startswith(b"big") else b"ok\n", peer)
            except OSError:
                pass


def sctp_socket(family):
    """A one-to-one SCTP socket (SOCK_STREAM, IPPROTO_SCTP), or None where the kernel has no SCTP."""
    try:
        return socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_SCTP)
    except OSError:
        return None


def echo_lines(conn):
    conn.setblocking(True)
    try:
        conn.sendall(b"ok\n")
        data = conn.recv(64)
        while data:
            conn.sendall(data)
            data = conn.recv(64)
    except OSError:
        pass
    finally:
        conn.close()


def try_one(host, port, proto, timeout, out, i, options):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ok = False
    if proto == "sctp":
        s = sctp_socket(family)
        if s is None:
            out[i] = False
            return
    else:
        s = socket.socket(family, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        if "sport" in options:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", int(options["sport"])))
        if proto in ("tcp", "sctp"):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.connect((host, port))
            ok = s.recv(16).startswith(b"ok")
        elif "size" in options:
            s.sendto(b"big" + b"." * (int(options["size"]) - 3), (host, port))
            data, _ = s.recvfrom(65536)
            ok = data.startswith(b"ok") and len(data) == BIG_REPLY
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
        threading.Thread(
            target=try_one,
            args=(t[0], int(t[1]), t[2], timeout, out, i, dict(o.split("=", 1) for o in t[3:])),
        )
        for i, t in enumerate(parsed)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t, ok in zip(parsed, out):
        print(t[0], t[1], t[2], "yes" if ok else "no")


def hold(host):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, HOLD_PORT))
    s.recv(3)  # the server's "ok"
    print("ready", flush=True)
    for line in sys.stdin:
        s.settimeout(2)
        try:
            s.sendall(line.encode())
            got = s.recv(64)
            print("ok" if got == line.encode() else "lost", flush=True)
        except OSError:
            print("lost", flush=True)


ICMPV6_NS = 135


def nd_send(dst, payload):
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
    # type, code, checksum (the kernel fills it in), reserved, target address, then the payload.
    message = struct.pack("!BBHI", ICMPV6_NS, 0, 0, 0) + socket.inet_pton(socket.AF_INET6, dst) + payload.encode()
    dropped = 0
    for _ in range(5):
        try:
            s.sendto(message, (dst, 0))
        except OSError as e:
            # A netkit pod's own program runs in its transmit: a drop there comes back
            # to the sender as ENOBUFS (NET_XMIT_DROP). Nothing left the pod.
            if e.errno != errno.ENOBUFS:
                raise
            dropped += 1
        time.sleep(0.05)
    print(f"sent {5 - dropped}, dropped {dropped}", flush=True)


def nd_listen():
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    print("ready", flush=True)
    while True:
        data = s.recv(65536)
        if data and 133 <= data[0] <= 137:
            print(data[24:].decode("ascii", "replace"), flush=True)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "serve":
        serve([int(p) for p in sys.argv[2:]])
    elif command == "hold":
        hold(sys.argv[2])
    elif command == "nd-send":
        nd_send(sys.argv[2], sys.argv[3])
    elif command == "nd-listen":
        nd_listen()
    elif command == "sctp":
        sys.exit(0 if all(sctp_socket(f) is not None for f in (socket.AF_INET, socket.AF_INET6)) else 1)
    else:
        probe(float(sys.argv[2]), sys.argv[3:])
