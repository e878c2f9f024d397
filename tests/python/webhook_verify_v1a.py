"""Verifies logged `v1a,` (Ed25519) webhook deliveries independently of the service, with
Python's `cryptography`, for tests/it/webhooks.rs.

argv[1] is a receiver's log (tests/python/webhook_receiver.py), argv[2:] the public keys
(`whpk_...`). For each logged request it prints one JSON line: its webhook-id, the number of
`v1a,` signatures in its header, for each public key (in the order given) the index of the
signature it verifies (or null), and whether the same request with one byte of its body
changed is rejected under every key.
"""

import base64
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def public_key(text):
    raw = base64.b64decode(text.removeprefix("whpk_"), validate=True)
    return Ed25519PublicKey.from_public_bytes(raw)


def verifies(key, signature, message):
    try:
        key.verify(signature, message)
        return True
    except InvalidSignature:
        return False


def which(key, signatures, message):
    for i, s in enumerate(signatures):
        if verifies(key, s, message):
            return i
    return None


def main():
    keys = [public_key(k) for k in sys.argv[2:]]
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            signatures = [
                base64.b64decode(s.removeprefix("v1a,"), validate=True)
                for s in r["signature"].split(" ")
                if s.startswith("v1a,")
            ]
            signed = f"{r['id']}.{r['timestamp']}.".encode()
            body = r["body"].encode("utf-8")
            tampered = body.replace(b"}", b" }", 1)
            print(
                json.dumps(
                    {
                        "id": r["id"],
                        "v1a": len(signatures),
                        "verified_by": [which(k, signatures, signed + body) for k in keys],
                        "tampered_rejected": all(
                            which(k, signatures, signed + tampered) is None for k in keys
                        ),
                    }
                ),
                flush=True,
            )


main()
