"""
A TCP peer for the socket-bypass tests, checking data integrity by SHA-256 on both ends.

server HOST PORT              accepts connections until killed. Per connection: sends
                              "hi\n", reads to EOF (plain recv, or with MSG_PEEK first),
                              then answers "R <bytes> <sha>\n" (what it received), then
                              "H <bytes> <sha>\n" and that many random bytes, then closes.
client HOST PORT SIZE METHOD [DELAY [SOURCE_PORT]]
                              connects (from SOURCE_PORT when given), waits for "hi" (and
                              DELAY seconds), sends SIZE random bytes with METHOD
                              (sendall | sendfile | splice | small), shuts down
                              its sending side, reads the answer and checks both hashes.
                              Prints "ok <sent> <received>" or exits 1 saying what differs.
clients HOST PORT N SIZE      N short connections one after another, each a client
                              sendall of SIZE + i bytes (i = 0..N-1): one process instead of
                              N, whose starts dominate under emulation.
hold HOST PORT                connects, waits for "hi", prints "connected" and sleeps.
hog HOST PORT N               listens on HOST:PORT and opens N connections to itself
                              (2N sockets of one pod), prints "held <N>" and sleeps.
squat LOCAL REMOTE PORT SOURCE_PORT
                              run where both addresses are local (a namespace that gave
                              itself two pods' addresses): listens on REMOTE:PORT, connects
                              to it from LOCAL:SOURCE_PORT, accepts, closes the connecting
                              end and prints "ready"; then reads whatever reaches the
                              accepted end until a line on its stdin, and prints
                              "stolen <bytes>".
cookie                        prints the SO_NETNS_COOKIE of a socket made in its namespace.

Other server modes (server HOST PORT MODE), each with its client:
duplex   / client HOST PORT 0 duplex
         both ends stream paced frames at once until the client reads "stop" on its
         stdin; each then ends its stream with the hash of what it sent, and the server
         answers "R <bytes> <sha>" for what it received. Prints "ok <sent> <received>".
reverse  / client HOST PORT SIZE reverse
         the server half-closes first: sends "H <bytes> <sha>" and REPLY bytes, shuts
         down its sending side, then reads the client's SIZE bytes (sent after the
         client saw EOF) to EOF over the half-open connection and prints "got <bytes>
         <sha> eagain <n>" on its stdout (n: the blocking recvs that said EAGAIN).
prefix   / client HOST PORT SIZE abort
         the client sends "S <seed> <size>", then SIZE bytes drawn from the seed, and
         closes with SO_LINGER 0 (RST) without waiting. The server reads until EOF or an
         error and prints "prefix <bytes> eof|reset" when what it read is the start of
         what was sent, "bad ..." otherwise.
reset    / hold HOST PORT
         the server sends "hi" and closes with SO_LINGER 0 (RST) half a second later; the
         client keeps its reset socket open.
sink     / client HOST PORT SIZE untilreset
         the server reads SIZE bytes, then closes with SO_LINGER 0; the client keeps
         writing and prints "reset <errno name>" when the kernel reports the reset.
The client method "peek" sends with sendall and reads the reply by MSG_PEEK first, in
uneven sizes, checking each recv against what the peek before it showed.
"""
import errno
import hashlib
import os
import random
import struct
import socket
import sys
import tempfile
import threading
import time

REPLY = 3 * 1024 * 1024 + 17


SPURIOUS = [0]


def recv(s, n, flags=0):
    """socket.recv on a blocking socket. A spliced socket's blocking recv returns EAGAIN
    when it is woken by something other than data, e.g. the ACK of its own FIN
    (tcp_bpf_recvmsg waits once, then gives up; bpf/README.md): retried, and counted
    in SPURIOUS so that a test can tell."""
    for _ in range(100):
        try:
            return s.recv(n, flags)
        except BlockingIOError:
            if s.gettimeout() == 0.0:
                raise
            SPURIOUS[0] += 1
    raise SystemExit("recv: EAGAIN 100 times in a row on a blocking socket")


def recv_line(s):
    line = b""
    while not line.endswith(b"\n"):
        chunk = recv(s, 1)
        if not chunk:
            raise SystemExit(f"connection closed inside a line: {line!r}")
        line += chunk
    return line.decode().strip()


def serve(conn):
    with conn:
        conn.sendall(b"hi\n")
        h = hashlib.sha256()
        n = 0
        while True:
            peeked = recv(conn, 65536, socket.MSG_PEEK)
            data = recv(conn, len(peeked)) if peeked else b""
            if data != peeked[: len(data)]:
                raise SystemExit("MSG_PEEK saw other bytes than recv")
            if not data:
                break
            h.update(data)
            n += len(data)
        conn.sendall(f"R {n} {h.hexdigest()}\n".encode())
        payload = os.urandom(REPLY)
        conn.sendall(f"H {len(payload)} {hashlib.sha256(payload).hexdigest()}\n".encode())
        conn.sendall(payload)


def seeded(seed, size):
    return random.Random(seed).randbytes(size)


def abort(s):
    """close() that sends RST: SO_LINGER on with a zero timeout."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = recv(s, n - len(data))
        if not chunk:
            raise SystemExit(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def send_frames(s, stop, pace):
    """Paced frames ([u32 length][bytes]) until stop is set, then a zero frame and the
    SHA-256 of every payload byte. Returns how many payload bytes went."""
    h = hashlib.sha256()
    n = 0
    while not stop.is_set():
        chunk = os.urandom(random.randint(1, 32768))
        s.sendall(struct.pack("!I", len(chunk)) + chunk)
        h.update(chunk)
        n += len(chunk)
        time.sleep(pace)
    s.sendall(struct.pack("!I", 0) + h.digest())
    return n, h.hexdigest()


def recv_frames(s):
    """Reads frames up to the zero frame; returns (bytes, sha) and checks the sender's hash."""
    h = hashlib.sha256()
    n = 0
    while True:
        (length,) = struct.unpack("!I", recv_exact(s, 4))
        if length == 0:
            break
        h.update(recv_exact(s, length))
        n += length
    if recv_exact(s, 32) != h.digest():
        raise SystemExit(f"frames: {n} bytes whose hash is not the one the sender sent")
    return n, h.hexdigest()


def serve_duplex(conn):
    with conn:
        conn.sendall(b"hi\n")
        stop = threading.Event()
        sender = threading.Thread(target=lambda: send_frames(conn, stop, 0.005))
        sender.start()
        n, digest = recv_frames(conn)
        stop.set()
        sender.join()
        conn.sendall(f"R {n} {digest}\n".encode())


def serve_reverse(conn):
    with conn:
        conn.sendall(b"hi\n")
        payload = os.urandom(REPLY)
        conn.sendall(f"H {len(payload)} {hashlib.sha256(payload).hexdigest()}\n".encode() + payload)
        conn.shutdown(socket.SHUT_WR)
        h = hashlib.sha256()
        n = 0
        while data := recv(conn, 65536):
            h.update(data)
            n += len(data)
        print(f"got {n} {h.hexdigest()} eagain {SPURIOUS[0]}", flush=True)


def serve_prefix(conn):
    conn.settimeout(20)
    with conn:
        conn.sendall(b"hi\n")
        _, seed, size = recv_line(conn).split()
        want = seeded(int(seed), int(size))
        got = bytearray()
        try:
            # Slow at first: the RST must find bytes sent and not yet read.
            got += recv(conn, 65536)
            time.sleep(0.5)
            while data := recv(conn, 65536):
                got += data
            how = "eof"
        except ConnectionResetError:
            how = "reset"
        except socket.timeout:
            how = "hang"
        ok = bytes(got) == want[: len(got)]
        print(f"prefix {len(got)} {how}" if ok else f"bad {len(got)} bytes are not what was sent", flush=True)


def serve_sink(conn):
    conn.sendall(b"hi\n")
    size = int(recv_line(conn))
    got = 0
    while got < size:
        data = recv(conn, min(65536, size - got))
        if not data:
            break
        got += len(data)
    abort(conn)


def serve_reset(conn):
    conn.sendall(b"hi\n")
    time.sleep(0.5)
    abort(conn)


SERVE = {
    "reply": serve,
    "duplex": serve_duplex,
    "reverse": serve_reverse,
    "prefix": serve_prefix,
    "sink": serve_sink,
    "reset": serve_reset,
}


def server(host, port, mode="reply"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(128)
    print("ready", flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=SERVE[mode], args=(conn,), daemon=True).start()


def connect(host, port, greeting=True, source_port=0):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(20)
    if source_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", source_port))
    s.connect((host, port))
    if greeting and recv_line(s) != "hi":
        raise SystemExit("no greeting")
    return s


def send(s, payload, method):
    if method in ("sendall", "eager", "peek"):
        s.sendall(payload)
    elif method == "small":
        for i in range(0, len(payload), 100):
            s.sendall(payload[i : i + 100])
    elif method == "sendfile":
        with tempfile.TemporaryFile() as f:
            f.write(payload)
            f.flush()
            f.seek(0)
            s.sendfile(f)
    elif method == "splice":
        r, w = os.pipe()
        sent = 0
        while sent < len(payload):
            n = os.write(w, payload[sent : sent + 65536])
            while n > 0:
                n -= os.splice(r, s.fileno(), n)
            sent += min(65536, len(payload) - sent)
        os.close(r)
        os.close(w)
    else:
        raise SystemExit(f"unknown method {method}")


def client(host, port, size, method, delay, source_port=0):
    if method in OTHER_CLIENTS:
        return OTHER_CLIENTS[method](host, port, size)
    # eager: write at once, before the server's end may be established (and spliced).
    s = connect(host, port, greeting=method != "eager", source_port=source_port)
    print("connected", flush=True)
    time.sleep(delay)
    payload = os.urandom(size)
    send(s, payload, method)
    s.shutdown(socket.SHUT_WR)
    if method == "eager" and recv_line(s) != "hi":
        raise SystemExit("no greeting")
    got = recv_line(s).split()
    want = ["R", str(size), hashlib.sha256(payload).hexdigest()]
    if got != want:
        raise SystemExit(f"server received {got}, sent {want}")
    _, n, digest = recv_line(s).split()
    h = hashlib.sha256()
    received = 0
    while True:
        data = peek_then_recv(s) if method == "peek" else recv(s, 65536)
        if not data:
            break
        h.update(data)
        received += len(data)
    if received != int(n) or h.hexdigest() != digest:
        raise SystemExit(f"received {received} bytes {h.hexdigest()}, server sent {n} {digest}")
    print(f"ok {size} {received}", flush=True)


def peek_then_recv(s):
    """MSG_PEEK of an uneven size, twice (a peek consumes nothing), then a recv of part of
    it: each must start with the bytes the peek before showed."""
    peeked = recv(s, random.randint(1, 70000), socket.MSG_PEEK)
    if recv(s, len(peeked), socket.MSG_PEEK) != peeked:
        raise SystemExit("a second MSG_PEEK saw other bytes than the first")
    data = recv(s, random.randint(1, len(peeked))) if peeked else b""
    if data != peeked[: len(data)]:
        raise SystemExit("recv returned other bytes than MSG_PEEK showed")
    return data


def client_duplex(host, port, _size):
    s = connect(host, port)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("connected", flush=True)
    s.settimeout(None)
    received = []
    reader = threading.Thread(target=lambda: received.append(recv_frames(s)))
    reader.start()
    sent, sent_digest = send_frames(s, stop, 0.005)
    s.shutdown(socket.SHUT_WR)
    reader.join()
    if not received:
        raise SystemExit("the server's stream did not end with its hash")
    _, n, digest = recv_line(s).split()
    if int(n) != sent or digest != sent_digest:
        raise SystemExit(f"server received {n} bytes {digest}, client sent {sent} {sent_digest}")
    print(f"ok {sent} {received[0][0]}", flush=True)


def client_reverse(host, port, size):
    s = connect(host, port)
    print("connected", flush=True)
    _, n, digest = recv_line(s).split()
    h = hashlib.sha256()
    received = 0
    while data := recv(s, 65536):
        h.update(data)
        received += len(data)
    if received != int(n) or h.hexdigest() != digest:
        raise SystemExit(f"received {received} bytes {h.hexdigest()}, server sent {n} {digest}")
    # The server's side is shut: this end still sends, over the half-open connection.
    payload = os.urandom(size)
    s.sendall(payload)
    s.close()
    print(f"ok {size} {received} {hashlib.sha256(payload).hexdigest()}", flush=True)


def client_abort(host, port, size):
    s = connect(host, port)
    seed = random.getrandbits(32)
    s.sendall(f"S {seed} {size}\n".encode())
    s.sendall(seeded(seed, size))
    abort(s)
    print(f"sent {size}", flush=True)


def client_untilreset(host, port, size):
    s = connect(host, port)
    s.sendall(f"{size}\n".encode())
    sent = 0
    try:
        for _ in range(100000):
            s.sendall(os.urandom(65536))
            sent += 65536
            time.sleep(0.001)
    except OSError as e:
        print(f"reset {errno.errorcode.get(e.errno, e.errno)} after {sent}", flush=True)
        return
    raise SystemExit(f"no error after {sent} bytes")


OTHER_CLIENTS = {"duplex": client_duplex, "reverse": client_reverse, "abort": client_abort, "untilreset": client_untilreset}


def hold(host, port):
    s = connect(host, port)
    print("connected", flush=True)
    threading.Event().wait()


def hog(host, port, n):
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 2 * n + 64), max(hard, 2 * n + 64)))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.bind((host, port))
    ls.listen(128)
    held = []
    for _ in range(n):
        c = socket.socket(family, socket.SOCK_STREAM)
        c.connect((host, port))
        held += [c, ls.accept()[0]]
    print(f"held {n}", flush=True)
    threading.Event().wait()


def squat(local, remote, port, source_port):
    family = socket.AF_INET6 if ":" in remote else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((remote, port))
    ls.listen(1)
    c = socket.socket(family, socket.SOCK_STREAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    c.bind((local, source_port))
    c.connect((remote, port))
    accepted, _ = ls.accept()
    # The connecting end leaves: the pod's real client may take its address and port.
    c.close()
    accepted.setblocking(False)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    stolen = 0
    while not stop.is_set():
        try:
            stolen += len(accepted.recv(65536))
        except BlockingIOError:
            pass
        time.sleep(0.01)
    print(f"stolen {stolen}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cookie":
        print(socket.socket().getsockopt(socket.SOL_SOCKET, 71, 8).hex(), flush=True)
        sys.exit(0)
    if mode == "squat":
        squat(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    host, port = sys.argv[2], int(sys.argv[3])
    if mode == "server":
        server(host, port, *sys.argv[4:5])
    elif mode == "client":
        delay = float(sys.argv[6]) if len(sys.argv) > 6 else 0
        client(host, port, int(sys.argv[4]), sys.argv[5], delay, int(sys.argv[7]) if len(sys.argv) > 7 else 0)
    elif mode == "clients":
        for i in range(int(sys.argv[4])):
            client(host, port, int(sys.argv[5]) + i, "sendall", 0)
    elif mode == "hold":
        hold(host, port)
    elif mode == "hog":
        hog(host, port, int(sys.argv[4]))
