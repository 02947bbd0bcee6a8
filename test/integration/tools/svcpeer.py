"""
A peer for the Service translation tests: servers that say who they are, and clients
that say which address they reached and which address the kernel shows them back.

serve NAME PORT [HOST...]     TCP and UDP servers on PORT of each HOST (default: any IPv4
                              and any IPv6) until killed. Each TCP connection is answered
                              "NAME <peer>\n" and closed; each UDP datagram "NAME <peer>".
tcp HOST PORT [N]             connects, prints "<reply> | peer <getpeername>"; N times
                              (a line each) when N is given: one process start, not N.
udp HOST PORT                 one datagram by sendto (unconnected): prints
                              "<reply> | from <recvfrom's source>".
udpc HOST PORT                the same on a connected UDP socket: "<reply> | peer <getpeername>".
tcpv6 HOST PORT               tcp on an AF_INET6 socket (HOST may be ::ffff:a.b.c.d).
udpv6 HOST PORT               udp on an AF_INET6 socket (HOST may be ::ffff:a.b.c.d).
hold HOST PORT [udp]          connects (TCP, or UDP), prints "connected <getpeername> cookie
                              <SO_COOKIE>", then each line on stdin is sent and the answer
                              printed ("closed <errno name>" when the socket fails).
victim HOST UDPPORT TCPPORT   a long-lived client: a connected UDP socket to HOST:UDPPORT
                              and a TCP connection to HOST:TCPPORT, held open; prints
                              "ready", then for each line on stdin asks both again and
                              prints "udp from <recvfrom's source> | tcp peer <getpeername>
                              | tcp <answer>" (the TCP connection otherwise idle).
tcpeach PORT HOST...          tcp once to each HOST, a line each.
udpeach PORT HOST...          one unconnected UDP socket sends a datagram to each HOST in
                              turn and waits for its answer: "<reply> | from <source>".
cookie                        prints the SO_NETNS_COOKIE of a socket made in its namespace,
                              as a decimal number.
Errors print "error <errno name>" and exit 0: the tests judge them.
"""
import errno
import select
import socket
import sys
import threading


def fmt(addr):
    return f"{addr[0]}:{addr[1]}"


def fail(e):
    print("error", errno.errorcode.get(e.errno, str(e.errno)) if e.errno else str(e), flush=True)
    sys.exit(0)


def answer(name, conn, peer):
    """Says who it is, then answers each line until the connection closes (or stays idle
    for ten minutes: a client holds one through another pod's churn, which takes minutes
    in the guests)."""
    conn.settimeout(600)
    try:
        conn.sendall(f"{name} {fmt(peer)}\n".encode())
        while True:
            data = conn.recv(4096)
            if not data:
                break
            conn.sendall(f"{name} {data.decode().strip()}\n".encode())
    except OSError:
        pass
    conn.close()


def serve(name, port, hosts):
    socks = []
    for host in hosts or ["0.0.0.0", "::"]:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            s = socket.socket(family, kind)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((host, port))
            if kind == socket.SOCK_STREAM:
                s.listen(64)
            socks.append(s)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select(socks, [], [])
        for s in ready:
            if s.type == socket.SOCK_STREAM:
                conn, peer = s.accept()
                # A connection held open must not stop the others: one thread each.
                threading.Thread(target=answer, args=(name, conn, peer), daemon=True).start()
            else:
                data, peer = s.recvfrom(4096)
                s.sendto(f"{name} {fmt(peer)}".encode(), peer)


def tcp(host, port, family):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect((host, port))
        reply = s.recv(4096).decode().strip()
        print(f"{reply} | peer {fmt(s.getpeername())}", flush=True)
    except OSError as e:
        fail(e)


def udp(host, port, family, connected):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        if connected:
            s.connect((host, port))
            s.send(b"q")
            reply = s.recv(4096).decode()
            print(f"{reply} | peer {fmt(s.getpeername())}", flush=True)
        else:
            s.sendto(b"q", (host, port))
            reply, source = s.recvfrom(4096)
            print(f"{reply.decode()} | from {fmt(source)}", flush=True)
    except OSError as e:
        fail(e)


def hold(host, port, udp):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect((host, port))
        if udp:
            s.send(b"hello")
        s.recv(4096)
        cookie = int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 57, 8), "little")  # SO_COOKIE
        print(f"connected {fmt(s.getpeername())} cookie {cookie}", flush=True)
    except OSError as e:
        fail(e)
    for line in sys.stdin:
        try:
            s.send(line.encode())
            data = s.recv(4096)
            if not data:
                print("closed EOF", flush=True)
                return
            print(data.decode().strip(), flush=True)
        except OSError as e:
            print("closed", errno.errorcode.get(e.errno, str(e.errno)), flush=True)
            return


def victim(host, udp_port, tcp_port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    u = socket.socket(family, socket.SOCK_DGRAM)
    u.settimeout(5)
    t = socket.socket(family, socket.SOCK_STREAM)
    t.settimeout(10)
    try:
        u.connect((host, udp_port))
        t.connect((host, tcp_port))
        t.recv(4096)
    except OSError as e:
        fail(e)
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            u.send(line.strip().encode())
            _, source = u.recvfrom(4096)
            udp = f"udp from {fmt(source)}"
        except OSError as e:
            udp = "udp error " + errno.errorcode.get(e.errno, str(e.errno))
        try:
            t.sendall(line.encode())
            answer = t.recv(4096).decode().strip()
            tcp = f"tcp peer {fmt(t.getpeername())} | tcp {answer}"
        except OSError as e:
            tcp = "tcp error " + errno.errorcode.get(e.errno, str(e.errno))
        print(f"{udp} | {tcp}", flush=True)


def udp_each(port, hosts):
    family = socket.AF_INET6 if ":" in hosts[0] else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(5)
    for host in hosts:
        try:
            s.sendto(b"q", (host, port))
            reply, source = s.recvfrom(4096)
            print(f"{reply.decode()} | from {fmt(source)}", flush=True)
        except OSError as e:
            fail(e)


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "serve":
        serve(args[0], int(args[1]), args[2:])
    elif mode == "tcp":
        for _ in range(int(args[2]) if len(args) > 2 else 1):
            tcp(args[0], int(args[1]), socket.AF_INET6 if ":" in args[0] else socket.AF_INET)
    elif mode == "tcpv6":
        for _ in range(int(args[2]) if len(args) > 2 else 1):
            tcp(args[0], int(args[1]), socket.AF_INET6)
    elif mode == "udp":
        udp(args[0], int(args[1]), socket.AF_INET6 if ":" in args[0] else socket.AF_INET, False)
    elif mode == "udpv6":
        udp(args[0], int(args[1]), socket.AF_INET6, False)
    elif mode == "udpc":
        udp(args[0], int(args[1]), socket.AF_INET6 if ":" in args[0] else socket.AF_INET, True)
    elif mode == "tcpeach":
        for host in args[1:]:
            tcp(host, int(args[0]), socket.AF_INET6 if ":" in host else socket.AF_INET)
    elif mode == "udpeach":
        udp_each(int(args[0]), args[1:])
    elif mode == "victim":
        victim(args[0], int(args[1]), int(args[2]))
    elif mode == "cookie":
        raw = socket.socket().getsockopt(socket.SOL_SOCKET, 71, 8)  # SO_NETNS_COOKIE
        print(int.from_bytes(raw, "little"))
    elif mode == "hold":
        hold(args[0], int(args[1]), len(args) > 2 and args[2] == "udp")
    else:
        sys.exit(f"unknown mode {mode}")


main()
