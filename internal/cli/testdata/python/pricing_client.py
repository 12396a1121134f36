#!/usr/bin/python3
"""A gRPC client in Python (grpcio, Debian's python3-grpcio) for pinlab's
lab pods: one channel to TARGET (a ClusterIP:port), pick_first as
grpcio's default, calling pricing.v1.Pricing/GetPrice RATE times a second
until COUNT calls or SECONDS have passed, whichever comes first.

No generated code: the request is encoded by hand (field 1, sku, a
string) and the reply's pod name (field 3) decoded by hand.

Prints "first reply from POD" after the first successful call, and
"calls OK FAILED" (the counts so far) every second and at the end.
"""
import sys
import time

import grpc


def encode_request(sku):
    b = sku.encode()
    return b"\x0a" + bytes([len(b)]) + b  # field 1, wire type 2; len < 128


def varint(buf, i):
    shift = n = 0
    while True:
        c = buf[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return n, i


def reply_pod(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            if field == 3:
                return buf[i:i + n].decode()
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return ""


def main():
    target, rate, count, seconds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    if count > 100000 or seconds > 600:
        sys.exit("bounds: at most 100000 calls and 600 s")
    channel = grpc.insecure_channel(target)
    get_price = channel.unary_unary(
        "/pricing.v1.Pricing/GetPrice",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    ok = failed = 0
    start = last = time.monotonic()
    for n in range(count):
        due = start + n / rate
        now = time.monotonic()
        if now - start > seconds:
            break
        if now - last >= 1:
            print("calls %d %d" % (ok, failed), flush=True)
            last = now
        if due > now:
            time.sleep(due - now)
        try:
            reply = get_price(encode_request("sku-%d" % n), timeout=1.0)
        except grpc.RpcError:
            failed += 1
            continue
        ok += 1
        if ok == 1:
            print("first reply from %s" % reply_pod(reply), flush=True)
    channel.close()
    print("calls %d %d" % (ok, failed), flush=True)


if __name__ == "__main__":
    main()
