"""
A TCP peer for the socket-bypass tests, checking data integrity by SHA-256 on both ends.

server HOST PORT              accepts connections until killed. Per connection: sends
                              "hi\n", reads to EOF (plain recv, or with MSG_PEEK first),
                              then answers "R <bytes> <sha>\n" (what it received), then
                              "H <bytes> <sha>\n" and that many random bytes, then closes.
client HOST PORT SIZE METHOD [DELAY]
                              connects, waits for "hi" (and DELAY seconds), sends SIZE
                              random bytes with METHOD (sendall | sendfile | splice |
                              small), shuts down
                              its sending side, reads the answer and checks both hashes.
                              Prints "ok <sent> <received>" or exits 1 saying what differs.
hold HOST PORT                connects, waits for "hi", prints "connected" and sleeps.
"""
import hashlib
import os
import socket
import sys
import tempfile
import threading
import time

REPLY = 3 * 1024 * 1024 + 17


def recv_line(s):
    line = b""
    while not line.endswith(b"\n"):
        chunk = s.recv(1)
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
            peeked = conn.recv(65536, socket.MSG_PEEK)
            data = conn.recv(len(peeked)) if peeked else b""
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


def server(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(128)
    print("ready", flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def connect(host, port, greeting=True):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect((host, port))
    if greeting and recv_line(s) != "hi":
        raise SystemExit("no greeting")
    return s


def send(s, payload, method):
    if method in ("sendall", "eager"):
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


def client(host, port, size, method, delay):
    # eager: write at once, before the server's end may be established (and spliced).
    s = connect(host, port, greeting=method != "eager")
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
        data = s.recv(65536)
        if not data:
            break
        h.update(data)
        received += len(data)
    if received != int(n) or h.hexdigest() != digest:
        raise SystemExit(f"received {received} bytes {h.hexdigest()}, server sent {n} {digest}")
    print(f"ok {size} {received}", flush=True)


def hold(host, port):
    s = connect(host, port)
    print("connected", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "server":
        server(host, port)
    elif mode == "client":
        client(host, port, int(sys.argv[4]), sys.argv[5], float(sys.argv[6]) if len(sys.argv) > 6 else 0)
    elif mode == "hold":
        hold(host, port)
