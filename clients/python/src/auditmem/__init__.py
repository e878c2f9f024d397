"""auditmem's Python client: `Client` and `AsyncClient` for the HTTP API, typed models
generated from its OpenAPI document (`auditmem.models`), and `auditmem.verify`, which checks
the service's proofs, checkpoints and export manifests offline."""

from . import models, verify
from .client import CLEAR, AsyncClient, AsyncIngestClient, Client, IngestClient
from .errors import AuditmemError, VerificationError

__all__ = [
    "CLEAR",
    "AsyncClient",
    "AsyncIngestClient",
    "AuditmemError",
    "Client",
    "IngestClient",
    "VerificationError",
    "models",
    "verify",
]
