"""The HTTP clients: `Client` (blocking) and `AsyncClient` (asyncio), on httpx.

Each API call is described once, as a `_Call` (method, path, query, body and the model its
`data` parses into); the two clients only differ in how they send it. Both:

- raise `AuditmemError` with the error envelope's status, `code` and `message`;
- retry 429 and 503 answers up to `max_retries` times, waiting what `Retry-After` says (a
  short exponential backoff when it says nothing); an answer asking for more than
  `max_retry_wait` seconds is raised at once, its wait in `AuditmemError.retry_after`;
- remember the highest `X-Auditmem-Position` any answer carried and send it back as
  `X-Auditmem-Min-Position`, so a read on another node of a cluster sees this client's writes
  (docs/API.md, "Log positions").
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from . import models
from .errors import AuditmemError

POSITION = "X-Auditmem-Position"
MIN_POSITION = "X-Auditmem-Min-Position"
RETRIED = (429, 503)


@dataclass
class _Call:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    # Parses the envelope's `data` (or the raw body when `raw`).
    parse: Callable[[Any], Any] = lambda d: d
    raw: bool = False


def _given(**kw: Any) -> dict[str, Any]:
    """The arguments that were given: None means "not given", never JSON null."""
    return {k: v for k, v in kw.items() if v is not None}


def _model(cls: type) -> Callable[[Any], Any]:
    return cls.model_validate


# The calls, one function each; the clients expose each under the same name.


def create_memory(content: str, memory_type: str, **fields: Any) -> _Call:
    """`POST /v1/memories`: `fields` are the other fields of the body (importance, user_id,
    agent_id, session_id, metadata, expires_at, resolve)."""
    body = {"content": content, "memory_type": memory_type, **_given(**fields)}
    return _Call("POST", "/v1/memories", body=body, parse=_model(models.Memory))


def create_memories(memories: list[dict[str, Any]]) -> _Call:
    """`POST /v1/memories/batch`: 1 to 100 memories, created together or not at all."""
    return _Call(
        "POST",
        "/v1/memories/batch",
        body={"memories": memories},
        parse=lambda d: [models.Memory.model_validate(m) for m in d["memories"]],
    )


def get_memory(memory_id: str) -> _Call:
    return _Call("GET", f"/v1/memories/{memory_id}", parse=_model(models.Memory))


def list_memories(
    *,
    memory_type: str | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    page: int | None = None,
    page_size: int | None = None,
) -> _Call:
    params = _given(
        memory_type=memory_type,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        page=page,
        page_size=page_size,
    )
    return _Call("GET", "/v1/memories", params=params, parse=_model(models.MemoryPage))


def query_memories(**body: Any) -> _Call:
    """`POST /v1/memories/query`: filters, memory_type, include_superseded, page, page_size."""
    return _Call(
        "POST",
        "/v1/memories/query",
        body=_given(**body),
        parse=_model(models.MemoryPage),
    )


def update_memory(memory_id: str, **fields: Any) -> _Call:
    """`PATCH /v1/memories/{id}` with content, importance, metadata or expires_at. Pass
    `metadata=CLEAR` (or `expires_at=CLEAR`) to clear one: None means "not given"."""
    body = {k: (None if v is CLEAR else v) for k, v in _given(**fields).items()}
    return _Call(
        "PATCH", f"/v1/memories/{memory_id}", body=body, parse=_model(models.Memory)
    )


def delete_memory(memory_id: str) -> _Call:
    return _Call(
        "DELETE", f"/v1/memories/{memory_id}", parse=_model(models.MemoryDeleted)
    )


def memory_history(memory_id: str) -> _Call:
    return _Call(
        "GET", f"/v1/memories/{memory_id}/history", parse=_model(models.MemoryHistory)
    )


def search(query: str, **options: Any) -> _Call:
    """`POST /v1/memories/search`: the results (top_k, min_similarity, memory_type, filters,
    search_mode, ... as `options`)."""
    return _Call(
        "POST",
        "/v1/memories/search",
        body={"query": query, **_given(**options)},
        parse=lambda d: [models.SearchResult.model_validate(r) for r in d["results"]],
    )


def extract(
    *,
    text: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    **options: Any,
) -> _Call:
    """`POST /v1/memories/extract` from `text` or chat `messages` (exactly one)."""
    body = _given(text=text, messages=messages, **options)
    return _Call(
        "POST", "/v1/memories/extract", body=body, parse=_model(models.Extracted)
    )


def erase(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    memory_ids: list[str] | None = None,
) -> _Call:
    """`POST /v1/erasures`: the receipt, whose `proof` `verify.erasure_receipt` checks."""
    body = _given(
        user_id=user_id, agent_id=agent_id, session_id=session_id, memory_ids=memory_ids
    )
    return _Call("POST", "/v1/erasures", body=body, parse=_model(models.ErasureReceipt))


def get_audit_log(audit_id: str) -> _Call:
    return _Call(
        "GET", f"/v1/audit/logs/{audit_id}", parse=_model(models.AuditLogDetail)
    )


def list_audit_logs(**params: Any) -> _Call:
    """One page of `GET /v1/audit/logs` (start_time, end_time, action, page, page_size,
    cursor); `audit_logs` iterates over every page."""
    return _Call(
        "GET",
        "/v1/audit/logs",
        params=_given(**params),
        parse=_model(models.AuditLogPage),
    )


def get_proof(audit_id: str, tree_size: int | None = None) -> _Call:
    """`GET /v1/audit/logs/{id}/proof`, as the JSON object `verify.inclusion_proof` checks."""
    return _Call(
        "GET", f"/v1/audit/logs/{audit_id}/proof", params=_given(tree_size=tree_size)
    )


def get_consistency(from_size: int, to_size: int | None = None) -> _Call:
    """`GET /v1/audit/consistency`, as the JSON object `verify.consistency_proof` checks."""
    return _Call(
        "GET",
        "/v1/audit/consistency",
        params=_given(**{"from": from_size, "to": to_size}),
    )


def get_checkpoint() -> _Call:
    """`GET /log/checkpoint`: the latest signed checkpoint note, with its cosignatures."""
    return _Call("GET", "/log/checkpoint", parse=lambda r: r.text, raw=True)


def create_export(
    *,
    start_time: str | None = None,
    end_time: str | None = None,
    format: str | None = None,
) -> _Call:
    body = _given(start_time=start_time, end_time=end_time, format=format)
    return _Call(
        "POST", "/v1/audit/logs/export", body=body, parse=_model(models.ExportCreated)
    )


def get_export(export_id: str) -> _Call:
    return _Call(
        "GET", f"/v1/audit/logs/export/{export_id}", parse=_model(models.ExportTask)
    )


def download_export(export_id: str) -> _Call:
    """The export file's bytes, exactly as served (its digest is what the manifest signs)."""
    return _Call(
        "GET",
        f"/v1/audit/logs/export/{export_id}/download",
        parse=lambda r: r.content,
        raw=True,
    )


def get_export_manifest(export_id: str) -> _Call:
    """The signed manifest, as the JSON object `verify.export_manifest` checks."""
    return _Call(
        "GET",
        f"/v1/audit/logs/export/{export_id}/manifest",
        parse=lambda r: r.json(),
        raw=True,
    )


def get_export_proofs(export_id: str) -> _Call:
    """The NDJSON text `verify.export_proofs` checks."""
    return _Call(
        "GET",
        f"/v1/audit/logs/export/{export_id}/proofs",
        parse=lambda r: r.text,
        raw=True,
    )


def ingest(entries: list[dict[str, Any]]) -> _Call:
    """`POST /admin/v1/audit/logs` (an `IngestClient`'s, with the ingest token): the ids."""
    return _Call(
        "POST",
        "/admin/v1/audit/logs",
        body={"entries": entries},
        parse=lambda d: [str(i) for i in d["ids"]],
    )


class _Clear:
    def __repr__(self) -> str:
        return "CLEAR"


CLEAR: Any = _Clear()
"""Sent as JSON null where None would mean "not given" (`update_memory(id, metadata=CLEAR)`)."""

_TENANT_CALLS = [
    create_memory,
    create_memories,
    get_memory,
    list_memories,
    query_memories,
    update_memory,
    delete_memory,
    memory_history,
    search,
    extract,
    erase,
    get_audit_log,
    list_audit_logs,
    get_proof,
    get_consistency,
    get_checkpoint,
    create_export,
    get_export,
    download_export,
    get_export_manifest,
    get_export_proofs,
]


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error(resp: httpx.Response) -> AuditmemError:
    code, message = None, resp.text
    try:
        env = resp.json()
        if isinstance(env, dict) and "code" in env:
            code, message = env["code"], env.get("message", "")
    except ValueError:
        pass
    return AuditmemError(
        resp.status_code,
        code,
        message,
        resp.headers.get("x-request-id"),
        _retry_after(resp),
    )


class _Base:
    """What both clients share: headers, positions, the retry policy, parsing."""

    def __init__(self, api_key: str, max_retries: int, max_retry_wait: float) -> None:
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.position = 0
        """The highest `X-Auditmem-Position` seen; sent as `X-Auditmem-Min-Position`."""

    def _request_headers(self) -> dict[str, str]:
        h = dict(self._headers)
        if self.position > 0:
            h[MIN_POSITION] = str(self.position)
        return h

    def _note(self, resp: httpx.Response) -> None:
        p = resp.headers.get(POSITION)
        if p is not None and p.isdigit():
            self.position = max(self.position, int(p))

    def _wait(self, resp: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying `resp`, or None to give up."""
        if resp.status_code not in RETRIED or attempt >= self.max_retries:
            return None
        after = _retry_after(resp)
        if after is None:
            return min(0.2 * 2**attempt, self.max_retry_wait)
        # A wait longer than the bound (an export quota's, hours away) is the caller's to
        # decide on: the error carries it as `retry_after`.
        return after if after <= self.max_retry_wait else None

    @staticmethod
    def _result(call: _Call, resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            raise _error(resp)
        if call.raw:
            return call.parse(resp)
        return call.parse(resp.json()["data"])


def _sync_method(spec: Callable[..., _Call]) -> Callable[..., Any]:
    @functools.wraps(spec)
    def method(self: Client, *args: Any, **kwargs: Any) -> Any:
        return self._run(spec(*args, **kwargs))

    return method


def _async_method(spec: Callable[..., _Call]) -> Callable[..., Any]:
    @functools.wraps(spec)
    async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await self._run(spec(*args, **kwargs))

    return method


class _SyncBase(_Base):
    """A blocking connection with the retry and position policy; `Client` and
    `IngestClient` add their calls."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(api_key, max_retries, max_retry_wait)
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, transport=transport
        )

    def __enter__(self) -> _SyncBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: _Call) -> Any:
        attempt = 0
        while True:
            resp = self._http.request(
                call.method,
                call.path,
                params=call.params or None,
                json=call.body,
                headers=self._request_headers(),
            )
            self._note(resp)
            wait = self._wait(resp, attempt)
            if wait is None:
                return self._result(call, resp)
            attempt += 1
            time.sleep(wait)


class Client(_SyncBase):
    """A blocking client of one tenant's API key: every call of the tenant API.

    >>> with Client("http://127.0.0.1:8080", "amk_...") as c:
    ...     m = c.create_memory("Prefers tea", "fact", user_id="u1")
    """

    def __enter__(self) -> Client:
        return self

    def audit_logs(self, **params: Any) -> Iterator[models.AuditLogEntry]:
        """Every entry of the range, newest first, following `next_cursor` page by page."""
        params = _given(**params)
        while True:
            page = self._run(list_audit_logs(**params))
            yield from page.logs
            if not page.next_cursor:
                return
            params = {**params, "cursor": page.next_cursor}
            params.pop("page", None)

    def wait_export(
        self, export_id: str, *, timeout: float = 300.0, first_wait: float = 0.05
    ) -> models.ExportTask:
        """Polls the export until it is no longer processing, doubling the wait up to 2 s. A
        failed export comes back with status `failed`; `TimeoutError` after `timeout` s.
        """
        deadline = time.monotonic() + timeout
        wait = first_wait
        while True:
            task = self._run(get_export(export_id))
            if task.status != "processing":
                return task
            if time.monotonic() + wait > deadline:
                raise TimeoutError(
                    f"export {export_id} still processing after {timeout} s"
                )
            time.sleep(wait)
            wait = min(wait * 2, 2.0)


class _AsyncBase(_Base):
    """The asyncio twin of `_SyncBase`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(api_key, max_retries, max_retry_wait)
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> _AsyncBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: _Call) -> Any:
        attempt = 0
        while True:
            resp = await self._http.request(
                call.method,
                call.path,
                params=call.params or None,
                json=call.body,
                headers=self._request_headers(),
            )
            self._note(resp)
            wait = self._wait(resp, attempt)
            if wait is None:
                return self._result(call, resp)
            attempt += 1
            await asyncio.sleep(wait)


class AsyncClient(_AsyncBase):
    """The asyncio twin of `Client`: the same methods, awaited."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def audit_logs(self, **params: Any) -> AsyncIterator[models.AuditLogEntry]:
        params = _given(**params)
        while True:
            page = await self._run(list_audit_logs(**params))
            for entry in page.logs:
                yield entry
            if not page.next_cursor:
                return
            params = {**params, "cursor": page.next_cursor}
            params.pop("page", None)

    async def wait_export(
        self, export_id: str, *, timeout: float = 300.0, first_wait: float = 0.05
    ) -> models.ExportTask:
        deadline = time.monotonic() + timeout
        wait = first_wait
        while True:
            task = await self._run(get_export(export_id))
            if task.status != "processing":
                return task
            if time.monotonic() + wait > deadline:
                raise TimeoutError(
                    f"export {export_id} still processing after {timeout} s"
                )
            await asyncio.sleep(wait)
            wait = min(wait * 2, 2.0)


class IngestClient(_SyncBase):
    """A gateway's client of `POST /admin/v1/audit/logs`, with the ingest token (or the admin
    token): `ingest(entries)` returns the new entries' ids."""

    def __enter__(self) -> IngestClient:
        return self

    ingest = _sync_method(ingest)


class AsyncIngestClient(_AsyncBase):
    """The asyncio twin of `IngestClient`."""

    async def __aenter__(self) -> AsyncIngestClient:
        return self

    ingest = _async_method(ingest)


for _spec in _TENANT_CALLS:
    setattr(Client, _spec.__name__, _sync_method(_spec))
    setattr(AsyncClient, _spec.__name__, _async_method(_spec))
