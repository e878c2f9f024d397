"""The two exceptions of the package: what the service answered, and what a proof failed."""

from __future__ import annotations


class AuditmemError(Exception):
    """An error answer of the service, carrying its envelope exactly.

    `status` is the HTTP status, `code` and `message` the envelope's (docs/API.md, "Error
    registry"); `code` is None only when the body was not the error envelope (a proxy's page).
    """

    def __init__(
        self,
        status: int,
        code: int | None,
        message: str,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} ({code}): {message}")
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after


class VerificationError(Exception):
    """A proof, a checkpoint or an export that did not verify. The message names the tamper
    kind in the words `auditmem verify` prints (docs/VERIFYING.md); `kind` names it for
    programs (`bad_signature`, `record_tampered`, ...). An export's check lists every failure
    it found in `failures`, the first of which is the message; a row of an export's proofs
    is named by `row`."""

    def __init__(
        self,
        message: str,
        kind: str,
        failures: list | None = None,
        row: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.failures = failures or []
        self.row = row
