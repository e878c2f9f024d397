"""Verifies logged webhook deliveries with the Standard Webhooks reference library
(PyPI `standardwebhooks`), for tests/it/webhooks.rs.

argv[1] is a receiver's log (tests/python/webhook_receiver.py), argv[2:] the secrets
(`whsec_...`). For each logged request it prints one JSON line: its webhook-id, whether each
secret alone verifies it (in the order given), and whether the same request with one byte of
its body changed is rejected under every secret.
"""

import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def verifies(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
        return True
    except WebhookVerificationError:
        return False


def main():
    secrets = sys.argv[2:]
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            headers = {
                "webhook-id": r["id"],
                "webhook-timestamp": r["timestamp"],
                "webhook-signature": r["signature"],
            }
            body = r["body"]
            tampered = body.replace("}", " }", 1)
            print(
                json.dumps(
                    {
                        "id": r["id"],
                        "verified": [verifies(s, body, headers) for s in secrets],
                        "tampered_rejected": all(
                            not verifies(s, tampered, headers) for s in secrets
                        ),
                    }
                ),
                flush=True,
            )


main()
