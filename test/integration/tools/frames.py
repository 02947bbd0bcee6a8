"""
Raw frames for the frame-corpus tests: sends hand-built Ethernet frames from a device
and records which marked frames a device receives, with packet sockets, as an attacker
with CAP_NET_RAW would send them.

send IFACE PROTOCOL HEX...   sends each frame (hex, from the Ethernet header on) once, in
                             order, through a packet socket bound to IFACE whose protocol
                             (skb->protocol for what it sends) is PROTOCOL (hex, e.g. 0800),
                             or "frame": each frame's own first ethertype. Prints "sent N"
                             (a frame the device drops on its way out counts as sent).
sniff IFACE                  prints "ready" once listening on IFACE (every frame the device
                             receives, before any program runs on it), then, when its stdin
                             closes, the markers it saw as a JSON list and exits.

A marker is MARK followed by a 4-byte big-endian number, anywhere in the frame: the
tests put one in each frame's payload, so each frame is recognised wherever it lands,
however its headers were rewritten on the way. ICMP and ICMPv6 are not read: an error
about a frame (port unreachable, from a pod that does not listen) quotes its marker.
"""

import errno
import json
import select
import socket
import struct
import sys

ETH_P_ALL = 0x0003
MARK = b"NKCF"
VLAN_TPIDS = (0x8100, 0x88A8)


def is_icmp(frame):
    """An ICMP or ICMPv6 packet, under any tags the frame still carries."""
    off = 12
    ethertype = struct.unpack("!H", frame[off : off + 2])[0] if len(frame) >= 14 else 0
    while ethertype in VLAN_TPIDS and len(frame) >= off + 6:
        off += 4
        ethertype = struct.unpack("!H", frame[off : off + 2])[0]
    l3 = off + 2
    if ethertype == 0x0800 and len(frame) > l3 + 9:
        return frame[l3 + 9] == 1
    if ethertype == 0x86DD and len(frame) > l3 + 6:
        return frame[l3 + 6] == 58
    return False


def send(iface, protocol, frames):
    sent = 0
    socks = {}
    for hexframe in frames:
        frame = bytes.fromhex(hexframe)
        proto = struct.unpack("!H", frame[12:14])[0] if protocol == "frame" else int(protocol, 16)
        sock = socks.get(proto)
        if sock is None:
            # The protocol a packet socket is bound with becomes skb->protocol of what it sends.
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
            sock.bind((iface, proto))
            socks[proto] = sock
        try:
            sock.send(frame)
        except OSError as e:
            # A drop on the way out reports back when the device's transmit runs the
            # program (netkit's peer hook: NET_XMIT_DROP becomes ENOBUFS); veth drops on
            # its far side, silently. Either way the frame was sent.
            if e.errno != errno.ENOBUFS:
                raise
        sent += 1
    print(f"sent {sent}", flush=True)


def sniff(iface):
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    seen = set()

    def take(frame, addr):
        # Outgoing copies (the device's own transmissions) are not receptions.
        if addr[2] == socket.PACKET_OUTGOING or is_icmp(frame):
            return
        at = frame.find(MARK)
        while at >= 0 and at + 8 <= len(frame):
            seen.add(struct.unpack("!I", frame[at + 4 : at + 8])[0])
            at = frame.find(MARK, at + 8)

    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([sock, sys.stdin], [], [])
        if sock in readable:
            take(*sock.recvfrom(65535))
        if sys.stdin in readable and not sys.stdin.buffer.read1(4096):
            break
    # What arrived before the end was asked for.
    sock.setblocking(False)
    while True:
        try:
            take(*sock.recvfrom(65535))
        except BlockingIOError:
            break
    print(json.dumps(sorted(seen)), flush=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "sniff":
        sniff(sys.argv[2])
    else:
        sys.exit(__doc__)


main()
