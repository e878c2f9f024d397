"""The clients against the real server: every call, its exact answer, errors as the envelope
said them, paging, retries and read-your-writes."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from auditmem import (
    CLEAR,
    AsyncClient,
    AsyncIngestClient,
    AuditmemError,
    Client,
    IngestClient,
    verify,
)

from .conftest import ADMIN_TOKEN, Server, _stop, start_server


class Counting(httpx.HTTPTransport):
    """The real transport, counting the requests and answers that went through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str, int]] = []
        self.headers: list[dict[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        self.sent.append((request.method, str(request.url), resp.status_code))
        self.headers.append(dict(request.headers))
        return resp


def error_of(f) -> AuditmemError:
    with pytest.raises(AuditmemError) as e:
        f()
    return e.value


def test_memories_from_create_to_delete(server: Server) -> None:
    with Client(server.url, server.key) as c:
        m = c.create_memory(
            "Alice prefers green tea in the morning",
            "fact",
            user_id="alice",
            importance=0.7,
            metadata={"source": "chat"},
        )
        assert (
            m.content,
            m.memory_type.value,
            m.importance,
            m.user_id,
            m.metadata,
        ) == (
            "Alice prefers green tea in the morning",
            "fact",
            0.7,
            "alice",
            {"source": "chat"},
        )
        assert c.get_memory(m.id) == m
        page = c.list_memories(user_id="alice")
        assert (
            page.total,
            page.page,
            page.page_size,
            [x.id for x in page.memories],
        ) == (
            1,
            1,
            20,
            [m.id],
        )
        u = c.update_memory(m.id, content="Alice prefers black tea", metadata=CLEAR)
        assert (u.id, u.content, u.importance, u.metadata, u.created_at) == (
            m.id,
            "Alice prefers black tea",
            0.7,
            None,
            m.created_at,
        )
        found = c.search("which tea does alice drink", top_k=3, user_id=None)
        assert found[0].id == m.id and found[0].content == "Alice prefers black tea"
        h = c.memory_history(m.id)
        assert (h.id, h.deleted, [v.change for v in h.versions]) == (
            m.id,
            False,
            ["created", "updated"],
        )
        assert h.versions[0].content == "Alice prefers green tea in the morning"
        d = c.delete_memory(m.id)
        assert (d.id, d.deleted) == (m.id, True)
        e = error_of(lambda: c.get_memory(m.id))
        assert (e.status, e.code, e.message) == (404, 4040, "memory not found")
        assert c.memory_history(m.id).deleted is True


def test_batch_query_and_extract(server: Server) -> None:
    with Client(server.url, server.key) as c:
        made = c.create_memories(
            [
                {
                    "content": "Deploys happen on Tuesdays",
                    "memory_type": "rule",
                    "agent_id": "ops",
                },
                {
                    "content": "The staging cluster is in Frankfurt",
                    "memory_type": "fact",
                    "agent_id": "ops",
                },
            ]
        )
        assert [(m.content, m.memory_type.value, m.agent_id) for m in made] == [
            ("Deploys happen on Tuesdays", "rule", "ops"),
            ("The staging cluster is in Frankfurt", "fact", "ops"),
        ]
        page = c.query_memories(filters={"agent_id": "ops"}, memory_type="rule")
        assert (page.total, [m.id for m in page.memories]) == (1, [made[0].id])
        x = c.extract(text="I live in Paris. My name is Bob.", user_id="bob")
        assert sorted(m.content for m in x.memories) == [
            "The user lives in Paris",
            "The user's name is Bob",
        ]
        assert {m.user_id for m in x.memories} == {"bob"}
        assert (x.skipped, x.skipped_messages) == ([], [])


def test_errors_carry_the_envelope_exactly(server: Server) -> None:
    with Client(server.url, server.key) as c:
        e = error_of(lambda: c.create_memory("", "fact"))
        assert (e.status, e.code, e.message) == (400, 4000, "content must not be empty")
        e = error_of(lambda: c.create_memory("x", "bogus"))
        assert (e.status, e.code, e.message) == (
            400,
            4000,
            "unknown memory_type 'bogus' (expected rule, fact or context)",
        )
        e = error_of(lambda: c.erase(user_id="a", session_id="b"))
        assert (e.status, e.code, e.message) == (
            400,
            4000,
            "give exactly one of user_id, agent_id, session_id or memory_ids, not user_id and session_id",
        )
        assert e.request_id
    with Client(server.url, "amk_not-a-key") as c:
        e = error_of(lambda: c.list_memories())
        assert (e.status, e.code) == (401, 4010)
    read_only = server.new_key(permissions=["memory.read"])
    with Client(server.url, read_only) as c:
        e = error_of(lambda: c.create_memory("x", "fact"))
        assert (e.status, e.code) == (403, 4030)


def test_audit_logs_page_through_every_entry(server: Server) -> None:
    tenant, key = server.new_tenant("business")
    with Client(server.url, key) as c:
        for i in range(5):
            c.create_memory(f"note {i}", "context")
        t = Counting()
        with Client(server.url, key, transport=t) as paged:
            entries = list(paged.audit_logs(page_size=2))
        # The five writes, newest first; the reads of this iteration log after it began.
        assert [e.action for e in entries] == ["memory.write"] * 5
        assert len({e.id for e in entries}) == 5
        assert [(m, u.split("?")[0], s) for m, u, s in t.sent] == [
            ("GET", f"{server.url}/v1/audit/logs", 200)
        ] * 3
        assert ["cursor=" in u for _, u, _ in t.sent] == [False, True, True]
        detail = c.get_audit_log(str(entries[0].id))
        assert (detail.id, detail.action, detail.http_status) == (
            entries[0].id,
            "memory.write",
            200,
        )
        assert detail.request_body == {"content": "note 4", "memory_type": "context"}


def test_erasure_forgets_and_its_receipt_verifies(server: Server) -> None:
    with Client(server.url, server.key) as c:
        kept = c.create_memory("Frank likes chess", "fact", user_id="frank")
        gone = c.create_memory("Erin likes jazz", "fact", user_id="erin")
        receipt = c.erase(user_id="erin")
        assert (receipt.erased.memories, receipt.erased.keys) == (1, 1)
        assert (receipt.predate_encryption, receipt.notice) == (0, None)
        e = error_of(lambda: c.get_memory(gone.id))
        assert (e.status, e.code) == (404, 4040)
        assert c.get_memory(kept.id).content == "Frank likes chess"
        ok = verify.erasure_receipt(receipt, server.log_key)
        assert (ok.seq, ok.message.split(" is record")[0]) == (
            receipt.seq,
            f"erasure {receipt.erasure_id}",
        )
        e = error_of(lambda: c.erase(memory_ids=[]))
        assert (e.status, e.code, e.message) == (
            400,
            4000,
            "memory_ids must name 1 to 1000 memories; it names 0",
        )


def test_ingested_entries_are_the_tenants(server: Server) -> None:
    tenant, key = server.new_tenant("business")
    with IngestClient(server.url, ADMIN_TOKEN) as g:
        ids = g.ingest(
            [
                {
                    "tenant_id": tenant,
                    "action": "gateway.chat",
                    "http_status": 200,
                    "model_id": "gpt-4o-mini",
                },
                {"tenant_id": tenant, "action": "rag.query", "http_status": 500},
            ]
        )
        assert len(ids) == 2
        e = error_of(
            lambda: g.ingest(
                [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 700}]
            )
        )
        assert (e.status, e.code) == (400, 4000)
        assert e.message.startswith("entries[0]: http_status")

    async def ingest_async() -> list[str]:
        async with AsyncIngestClient(server.url, ADMIN_TOKEN) as g:
            return await g.ingest(
                [{"tenant_id": tenant, "action": "rag.query", "http_status": 204}]
            )

    ids += asyncio.run(ingest_async())
    with Client(server.url, key) as c:
        got = {str(x.id): (x.action, x.http_status, x.model_id) for x in c.audit_logs()}
        assert got == {
            ids[0]: ("gateway.chat", 200, "gpt-4o-mini"),
            ids[1]: ("rag.query", 500, None),
            ids[2]: ("rag.query", 204, None),
        }


def test_positions_are_carried_back(server: Server) -> None:
    t = Counting()
    with Client(server.url, server.key, transport=t, max_retries=0) as c:
        assert c.position == 0
        m = c.create_memory("position one", "fact")
        first = c.position
        assert first > 0
        assert "x-auditmem-min-position" not in t.headers[0]
        c.get_memory(m.id)
        assert t.headers[1]["x-auditmem-min-position"] == str(first)
        assert c.position > first
        # A position this node has not reached: it waits --consistency-wait-ms, then 503.
        c.position = 10**12
        e = error_of(lambda: c.get_memory(m.id))
        assert (e.status, e.code) == (503, 5030)
        assert "position 1000000000000 did not arrive within 100 ms" in e.message


def test_exports_wait_download_and_verify(server: Server) -> None:
    tenant, key = server.new_tenant("business")
    with Client(server.url, key) as c:
        for i in range(3):
            c.create_memory(f"exported {i}", "fact")
        for fmt in ("csv", "json"):
            created = c.create_export(format=fmt)
            assert created.status == "processing"
            task = c.wait_export(created.export_id)
            assert (task.status, task.format) == ("completed", fmt)
            data = c.download_export(created.export_id)
            rows = verify.parse_export_rows(data)
            assert task.records == len(rows)
            # The tenant's first entries, in chain order, are the three writes.
            assert [(r["action"], r["chain_index"]) for r in rows[:3]] == [
                ("memory.write", 1),
                ("memory.write", 2),
                ("memory.write", 3),
            ]
            if fmt == "csv":
                assert len(rows) == 3
            assert len(data) == task.file_size
            manifest = c.get_export_manifest(created.export_id)
            ok = verify.export_manifest(data, manifest, server.public_key)
            assert (ok.rows, ok.export_id, ok.key_pinned) == (
                task.records,
                created.export_id,
                True,
            )
            proofs = c.get_export_proofs(created.export_id)
            msg = verify.export_proofs(proofs, server.log_key, data)
            assert msg.startswith(
                f"{task.records} rows of export {created.export_id}, the rows of the export in its order"
            )
        e = error_of(lambda: c.download_export("01a21e64-3c19-72ac-aee9-bf8c8e2583ee"))
        assert (e.status, e.code) == (404, 4040)


def test_retries_honour_retry_after() -> None:
    with tempfile.TemporaryDirectory(prefix="auditmem-sdk-rl-") as d:
        proc, url, _, _ = start_server(
            Path(d), ["--rate-limit-per-sec", "1", "--rate-limit-burst", "2"]
        )
        try:
            s = Server(url, "", "", "", "", "", Path(d))
            _, key = s.new_tenant("pro")
            t = Counting()
            with Client(url, key, transport=t, max_retries=2) as c:
                # Two tokens, one more a second: within a few calls one is refused, waits
                # its Retry-After (1 s) and is sent again, answered.
                for _ in range(10):
                    before, start = len(t.sent), time.monotonic()
                    c.list_memories()
                    statuses = [status for _, _, status in t.sent[before:]]
                    if statuses != [200]:
                        break
                assert statuses == [429, 200]
                assert time.monotonic() - start >= 1.0
            # A Retry-After beyond max_retry_wait is not waited for: raised at once.
            t = Counting()
            with Client(url, key, transport=t, max_retry_wait=0.5) as c:
                for _ in range(10):
                    try:
                        c.list_memories()
                    except AuditmemError as refused:
                        e = refused
                        break
                else:
                    pytest.fail("the rate limit never refused a call")
                assert (e.status, e.code, e.retry_after) == (429, 4290, 1.0)
                assert [status for _, _, status in t.sent].count(429) == 1
        finally:
            _stop(proc)


def test_async_client(server: Server) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, server.key) as c:
            m = await c.create_memory("async memory", "context", session_id="s1")
            assert (m.content, m.session_id) == ("async memory", "s1")
            assert (await c.get_memory(m.id)) == m
            assert c.position > 0
            with pytest.raises(AuditmemError) as e:
                await c.create_memory("", "fact")
            assert (e.value.status, e.value.code, e.value.message) == (
                400,
                4000,
                "content must not be empty",
            )
            actions = [
                x.action async for x in c.audit_logs(page_size=1, action="memory.write")
            ]
            assert actions and set(actions) == {"memory.write"}
            entry = next(
                x for x in [x async for x in c.audit_logs(action="memory.write")]
            )
            proof = await c.get_proof(str(entry.id))
            ok = verify.inclusion_proof(proof, server.log_key)
            assert ok.seq == proof["seq"]

    asyncio.run(run())
