# Generated from docs/openapi.json by clients/python/generate.sh: do not edit.

from __future__ import annotations

from enum import StrEnum
from typing import Any
from uuid import UUID

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    confloat,
    conint,
    constr,
)


class AsOfShown(BaseModel):
    at: str | None = Field(
        None,
        description='When the record at that position was written (RFC 3339); null for position 0.',
    )
    embedder_changed: bool | None = Field(
        None,
        description='A search: true when a memory searched was embedded by another model than the one that\nembedded the query, so the ranking may differ from what was answered then.',
    )
    events_replayed: conint(ge=0) = Field(
        ...,
        description="How many of the tenant's memory events were replayed to answer.",
    )
    memory_models: list[str] | None = Field(
        None,
        description='A search: the models the memories searched were embedded with then.',
    )
    position: conint(ge=0) = Field(
        ..., description='The log position the answer stands right after.'
    )
    query_model: str | None = Field(
        None, description='A search: the model that embedded the query now.'
    )


class Checkpoint(BaseModel):
    hash: str = Field(..., description='Lowercase hex of the record hash at `seq`.')
    note: str | None = Field(
        None,
        description='The same tree head as a C2SP tlog-checkpoint in a C2SP signed note (origin, `seq`,\n`root`), signed by the same key; absent where `root` is.',
    )
    public_key: str = Field(
        ..., description='Lowercase hex of the ed25519 public key that signed it.'
    )
    root: str | None = Field(
        None,
        description="Base64 of the Merkle tree's root hash at tree size `seq` (`crate::tlog`); absent in\ncheckpoints signed before the tree existed.",
    )
    seq: conint(ge=0)
    signature: str = Field(
        ..., description='Lowercase hex of the signature over [`Checkpoint::message`].'
    )
    time: str = Field(..., description='RFC 3339 UTC, when it was signed.')


class CheckpointEnvelope(BaseModel):
    data: Checkpoint
    success: bool


class ConsistencyProof(BaseModel):
    checkpoint: str | None = Field(
        None,
        description='The signed checkpoint of `to`, when one was signed at that size.',
    )
    from_: conint(ge=0) = Field(..., alias='from')
    from_root: str = Field(
        ..., description='Base64 of the root hash of the tree of `from` leaves.'
    )
    proof: list[str] = Field(
        ...,
        description='The RFC 6962 consistency proof, each hash base64; empty when `from` is 0 or `to`.',
    )
    to: conint(ge=0)
    to_root: str = Field(
        ..., description='Base64 of the root hash of the tree of `to` leaves.'
    )


class ConsistencyProofEnvelope(BaseModel):
    data: ConsistencyProof
    success: bool


class ContentPart(BaseModel):
    text: str | None = None
    type: str


class Erased(BaseModel):
    audit_entries: conint(ge=0) = Field(
        ...,
        description="The tenant's audit entries logged before the erasure and sealed under a destroyed key\n(every entry that showed an erased memory or named the erased scope).",
    )
    exports: conint(ge=0) = Field(
        ...,
        description='Export files (completed and not expired, or being written) holding one of those\nentries: their rows of it download erased.',
    )
    keys: conint(ge=0) = Field(..., description='Data keys destroyed.')
    memories: conint(ge=0) = Field(
        ..., description='Memories erased: every memory sealed under a destroyed key.'
    )


class ErasureProof(BaseModel):
    checkpoint: str = Field(
        ..., description='The signed checkpoint of `tree_size`, as a C2SP signed note.'
    )
    erasure_id: UUID = Field(..., description='The erasure the record holds.')
    inclusion: list[str] = Field(
        ..., description='The RFC 6962 audit path, leaf to root, each hash base64.'
    )
    leaf_index: conint(ge=0) = Field(
        ..., description="The record's leaf in the Merkle tree: `seq - 1`."
    )
    record: str = Field(..., description='Base64 of the record as stored.')
    record_hash: str = Field(
        ..., description="Lowercase hex of the record's blake3 hash."
    )
    root_hash: str = Field(..., description="Base64 of that tree's root hash.")
    seq: conint(ge=0) = Field(
        ..., description="The record's place in the log (1-based)."
    )
    tree_size: conint(ge=0)


class ErasureReceipt(BaseModel):
    checkpoint: Checkpoint = Field(
        ...,
        description='A signed checkpoint whose tree holds the erasure event (`checkpoint.seq >= seq`).',
    )
    erased: Erased
    erased_at: str = Field(..., description='RFC 3339 UTC.')
    erasure_id: UUID
    notice: str | None = Field(
        None,
        description='`"N records predate encryption and cannot be shredded"` when `predate_encryption` is not\n0, else null.',
    )
    predate_encryption: conint(ge=0) = Field(
        ...,
        description='Erased memories stored before encryption (in plaintext in the log), which destroying\nkeys cannot shred; 0 on a data dir that holds none.',
    )
    proof: ErasureProof = Field(
        ...,
        description="The erasure event's record and its inclusion proof in the checkpoint's tree:\n`auditmem verify --proof RECEIPT --pubkey KEY` checks it offline.",
    )
    seq: conint(ge=0) = Field(..., description='The log position of the erasure event.')


class ErasureReceiptEnvelope(BaseModel):
    data: ErasureReceipt
    success: bool


class ErrorEnvelope(BaseModel):
    code: int = Field(..., description='A code of the error registry (docs/API.md).')
    data: Any | None = None
    message: str
    success: bool


class ExportCreated(BaseModel):
    download_url: str | None = None
    estimated_records: conint(ge=0)
    export_id: str
    status: str


class ExportCreatedEnvelope(BaseModel):
    code: int = Field(..., description='1000')
    data: ExportCreated
    message: str
    success: bool


class ExportFormatName(StrEnum):
    csv = 'csv'
    json = 'json'
    ocsf = 'ocsf'


class ExportRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    end_time: str | None = Field(None, description='ISO 8601; default: now.')
    format: ExportFormatName | None = None
    start_time: str | None = Field(
        None, description="ISO 8601; default: the start of the plan's retention window."
    )


class GivenContent(RootModel[str | list[ContentPart]]):
    root: str | list[ContentPart] = Field(
        ..., description="A message's content: a string or content parts."
    )


class GivenMessage(BaseModel):
    content: GivenContent | None = None
    occurred_at: str | None = Field(
        None,
        description="ISO 8601: when this message was said. A memory extracted from it takes this time (from\nseveral messages: the latest of theirs); a message without one counts as the request's\n`occurred_at`.",
    )
    role: str = Field(
        ...,
        description="system, developer, user, assistant, tool or function, in any case. A message of\nanother role is skipped and named in the answer's `skipped_messages`.",
    )


class InclusionProof(BaseModel):
    audit_id: UUID = Field(..., description='The audit entry the record holds.')
    checkpoint: str | None = Field(
        None,
        description='The signed checkpoint (C2SP tlog-checkpoint in a signed note, with any witness\ncosignatures) of `tree_size`; absent when none was signed at that size.',
    )
    inclusion: list[str] = Field(
        ..., description='The RFC 6962 audit path, leaf to root, each hash base64.'
    )
    leaf_index: conint(ge=0) = Field(
        ..., description="The record's leaf in the Merkle tree: `seq - 1`."
    )
    record: str = Field(
        ...,
        description='Base64 of the record as stored: the msgpack array\n`[seq, ts_micros, prev hash, hash, event]` (docs/VERIFYING.md).',
    )
    record_hash: str = Field(
        ...,
        description="Lowercase hex of the record's blake3 hash; the leaf is `seq (8 bytes BE) || this`.",
    )
    root_hash: str = Field(..., description="Base64 of that tree's root hash.")
    seq: conint(ge=0) = Field(
        ..., description="The record's place in the log (1-based)."
    )
    tree_size: conint(ge=0) = Field(
        ..., description='The size of the tree the proof is for.'
    )


class InclusionProofEnvelope(BaseModel):
    code: int = Field(..., description='1000')
    data: InclusionProof
    message: str
    success: bool


class Ingested(BaseModel):
    ids: list[str]


class IngestedEnvelope(BaseModel):
    data: Ingested
    success: bool


class KeyScopeAnswer(BaseModel):
    agent_id: str | None = None
    session_id: str | None = None
    user_id: str


class KeyScopeRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    agent_id: constr(min_length=1, max_length=256) | None = None
    session_id: constr(min_length=1, max_length=256) | None = None
    user_id: constr(min_length=1, max_length=256)


class LogHead(BaseModel):
    hash: str
    seq: conint(ge=0)


class LogHeadEnvelope(BaseModel):
    data: LogHead
    success: bool


class Manifest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    completed_at: str
    end_time: str
    export_id: str
    file_blake3: str
    file_bytes: conint(ge=0) = Field(
        ..., description="The file's size and blake3 (lowercase hex)."
    )
    first_chain_index: conint(ge=0) | None = None
    first_hash: str | None = None
    first_id: str | None = Field(
        None,
        description='Audit id, chain position and hash (lowercase hex) of the first and last row; null\nwithout the chain or rows.',
    )
    format: str = Field(..., description='csv, json or ocsf.')
    formula_guard: bool = Field(
        ...,
        description="Whether CSV text cells that a spreadsheet would read as a formula (starting with `=`,\n`+`, `-`, `@`, a tab or a carriage return), or that start with `'`, carry a leading `'`.",
    )
    last_chain_index: conint(ge=0) | None = None
    last_hash: str | None = None
    last_id: str | None = None
    public_key: str = Field(
        ...,
        description='Lowercase hex of the ed25519 key that signed it (the checkpoint key) and of the\nsignature.',
    )
    records: conint(ge=0) = Field(..., description='Rows in the file.')
    request_seq: conint(ge=0) = Field(
        ...,
        description="The log position of the request: the file holds the range's entries logged before it.",
    )
    requested_at: str
    signature: str
    start_time: str = Field(
        ..., description='The requested range, RFC 3339 with microseconds, inclusive.'
    )
    tenant_id: str
    version: str = Field(..., description='`auditmem/export-manifest/v1`.')
    with_chain: bool = Field(
        ...,
        description='Whether rows carry `chain_index`, `prev_hash` and `hash` (business and custom plans).',
    )


class MemoryBatchUpdateItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    content: constr(pattern=r'\S', min_length=1, max_length=10000) | None = None
    expires_at: str | None = None
    id: str
    importance: confloat(ge=0.0, le=1.0) | None = None
    metadata: dict[str, Any] | None = None
    occurred_at: str | None = None


class MemoryBatchUpdateRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    memories: list[MemoryBatchUpdateItem] = Field(
        ...,
        description='1 to 100 items, each a `MemoryBatchUpdateItem`.',
        max_length=100,
        min_length=1,
    )


class MemoryDeleted(BaseModel):
    deleted: bool
    id: str


class MemoryDeletedEnvelope(BaseModel):
    data: MemoryDeleted
    success: bool


class MemoryId(RootModel[str]):
    root: str


class MemoryResolution(BaseModel):
    duplicate_of: str | None = None
    stored: bool = Field(
        ...,
        description='Whether the memory asked for was stored (false: it duplicates `duplicate_of`, and the\nanswer is that stored memory).',
    )
    superseded: list[str] = Field(
        ..., description='The stored memories the new one superseded.'
    )


class MemoryTypeName(StrEnum):
    rule = 'rule'
    fact = 'fact'
    context = 'context'


class MemoryUpdateRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    content: constr(pattern=r'\S', min_length=1, max_length=10000) | None = Field(
        None, description='1 to 10,000 characters after trimming.'
    )
    expires_at: str | None = Field(
        None, description='ISO 8601, in the future; null clears it.'
    )
    importance: confloat(ge=0.0, le=1.0) | None = Field(None, description='0.0 to 1.0.')
    metadata: dict[str, Any] | None = Field(
        None, description='Replaces the metadata object; null clears it.'
    )
    occurred_at: str | None = Field(
        None, description='ISO 8601, past or future; null clears it.'
    )


class MemoryVersion(BaseModel):
    agent_id: str | None = None
    at: str
    audit_id: str | None = None
    batch_memory_type: MemoryTypeName | None = None
    change: str = Field(
        ..., description='created, updated, superseded, deleted, expired or erased.'
    )
    content: str | None = Field(
        None,
        description='The content set (created, updated; null when an update left it).',
    )
    erased: bool | None = Field(
        None,
        description="The memory was erased: this version's personal fields (`content`, `metadata`) are\nnull, whatever they were. Absent (false) otherwise.",
    )
    expires_at: str | None = Field(
        None,
        description='The expiry set (created, updated; null when an update cleared it).',
    )
    importance: float | None = Field(
        None,
        description='The importance set (created, updated; null when an update left it).',
    )
    memory_type: MemoryTypeName | None = None
    metadata: dict[str, Any] | None = Field(
        None,
        description='The metadata set (created, updated; null when an update cleared it).',
    )
    occurred_at: str | None = Field(
        None,
        description='The occurrence time set (created, updated; null when an update cleared it).',
    )
    seq: conint(ge=0)
    session_id: str | None = None
    superseded_by: str | None = Field(
        None, description='The newer memory that superseded it (superseded).'
    )
    user_id: str | None = Field(None, description='Scope a created memory was given.')


class PermissionName(StrEnum):
    audit_read = 'audit.read'
    audit_export = 'audit.export'
    memory_read = 'memory.read'
    memory_write = 'memory.write'
    memory_erase = 'memory.erase'
    webhooks_manage = 'webhooks.manage'


class PlanName(StrEnum):
    free = 'free'
    basic = 'basic'
    pro = 'pro'
    business = 'business'
    custom = 'custom'


class PublicKey(BaseModel):
    algorithm: str = Field(..., description='Always `ed25519`.')
    origin: str | None = Field(
        None,
        description="The checkpoints' origin, the name of the key in their signed notes.",
    )
    public_key: str = Field(..., description='Lower-case hex.')
    verifier_key: str | None = Field(
        None,
        description="The key as a C2SP signed-note verifier key (`<origin>+<key id>+<base64>`): what\n`auditmem verify --pubkey`, Go's `note.NewVerifier` and witnesses take.",
    )


class PublicKeyEnvelope(BaseModel):
    data: PublicKey
    success: bool


class RevokedKey(BaseModel):
    id: str
    revoked: bool
    revoked_at: str


class RevokedKeyEnvelope(BaseModel):
    data: RevokedKey
    success: bool


class SearchExplain(BaseModel):
    keyword_rank: conint(ge=0) | None = Field(
        None, description='Its place in the keyword list (from 1), if it was in it.'
    )
    keyword_score: float | None = None
    keyword_weight: float | None = None
    rrf_k: float | None = Field(
        None, description="Hybrid: the fusion's constant and weights."
    )
    search_mode: str
    semantic_final_score: float = Field(
        ..., description='`0.85 * score + 0.15 * importance`.'
    )
    semantic_rank: conint(ge=0) | None = Field(
        None, description='Its place in the semantic list (from 1), if it was in it.'
    )
    semantic_weight: float | None = None


class SearchModeName(StrEnum):
    semantic = 'semantic'
    keyword = 'keyword'
    hybrid = 'hybrid'


class SearchRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    as_of: dict[str, Any] | None = Field(
        None,
        description='A log position or an RFC 3339 time: the answer as the store stood right after it\n(docs/API.md, "Reading the past").',
    )
    explain: bool | None = Field(
        None,
        description="Default false: true adds each result's ranking breakdown (`explain`).",
    )
    filters: dict[str, Any] | None = Field(
        None,
        description='Only memories this filter matches (see `POST /v1/memories/query`).',
    )
    include_superseded: bool | None = Field(
        None, description='Default false: memories another superseded are left out.'
    )
    keyword_weight: confloat(ge=0.0, le=10.0) | None = Field(
        None, description="Hybrid: the keyword list's weight (0 to 10, default 1.5)."
    )
    memory_type: MemoryTypeName | None = None
    min_similarity: confloat(ge=-1.0, le=1.0) | None = Field(
        None, description='-1.0 to 1.0, default 0.'
    )
    query: constr(pattern=r'\S', min_length=1, max_length=10000) = Field(
        ..., description='1 to 10,000 characters after trimming.'
    )
    rrf_k: confloat(ge=0.0, le=1000.0) | None = Field(
        None,
        description="Hybrid: the fusion's constant added to every rank (0 to 1000, default 2).",
    )
    search_mode: SearchModeName | None = None
    semantic_weight: confloat(ge=0.0, le=10.0) | None = Field(
        None, description="Hybrid: the semantic list's weight (0 to 10, default 1)."
    )
    top_k: conint(ge=1, le=100) | None = Field(
        None, description='1 to 100, default 5; a whole number written as 5.0 is 5.'
    )


class SearchResult(BaseModel):
    agent_id: str | None = None
    content: str
    explain: SearchExplain | None = None
    final_score: float = Field(
        ...,
        description='The value results are ranked by: `0.85 * score + 0.15 * importance` (semantic), the\nBM25 score (keyword) or the fused score (hybrid).',
    )
    id: str
    importance: float
    keyword_score: float | None = Field(
        None, description='The BM25 score, where keyword search contributed the result.'
    )
    memory_type: MemoryTypeName
    metadata: dict[str, Any] | None = None
    occurred_at: str | None = Field(
        None,
        description='When what it says happened, as the caller gave it (`occurred_at`).',
    )
    score: float = Field(..., description='Cosine similarity.')
    session_id: str | None = None
    superseded_by: str | None = None
    user_id: str | None = None


class SearchResults(BaseModel):
    as_of: AsOfShown | None = None
    results: list[SearchResult]


class SkippedMemory(BaseModel):
    content: str
    duplicate_of: str
    memory_type: MemoryTypeName
    reason: str


class SkippedMessage(BaseModel):
    index: conint(ge=0) = Field(..., description='Its position in `messages`, from 0.')
    reason: str = Field(..., description='e.g. `unknown role "narrator"`.')


class Tenant(BaseModel):
    created_at: str
    credits: float
    id: str
    name: str
    plan: PlanName
    subscription_active: bool
    updated_at: str


class TenantEnvelope(BaseModel):
    data: Tenant
    success: bool


class TenantList(BaseModel):
    tenants: list[Tenant]
    total: conint(ge=0)


class TenantListEnvelope(BaseModel):
    data: TenantList
    success: bool


class Tokens(BaseModel):
    completion_tokens: conint(ge=0)
    prompt_tokens: conint(ge=0)
    total_tokens: conint(ge=0)


class UpdateTenantRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    credits: confloat(ge=0.0) | None = None
    name: constr(pattern=r'\S', min_length=1, max_length=200) | None = None
    plan: PlanName | None = None
    subscription_active: bool | None = None


class WebhookDeletedView(BaseModel):
    deleted: bool
    id: UUID


class WebhookDeletedViewEnvelope(BaseModel):
    data: WebhookDeletedView
    success: bool


class WebhookEventType(StrEnum):
    audit_entry = 'audit.entry'
    memory_created = 'memory.created'
    memory_updated = 'memory.updated'
    memory_deleted = 'memory.deleted'
    memory_superseded = 'memory.superseded'
    memory_expired = 'memory.expired'
    erasure_completed = 'erasure.completed'
    export_completed = 'export.completed'


class WebhookSignatureScheme(StrEnum):
    hmac_sha256 = 'hmac-sha256'
    ed25519 = 'ed25519'


class WebhookView(BaseModel):
    audit_actions: list[str]
    created_at: AwareDatetime
    delivered_through: conint(ge=0) = Field(
        ...,
        description='Every event of the tenant up to this log position was delivered or given up on.',
    )
    disabled_reason: str | None = Field(
        None, description='Why the service disabled it (it answered 410 Gone).'
    )
    enabled: bool
    event_types: list[WebhookEventType]
    id: UUID
    previous_public_key: str | None = Field(
        None,
        description='`ed25519` only: the public key before the last rotation, while its key still signs too\n(until `previous_secret_expires_at`).',
    )
    previous_secret_expires_at: AwareDatetime | None = Field(
        None,
        description='Until when the secret before the last rotation still signs too.',
    )
    public_key: str | None = Field(
        None,
        description='`ed25519` only: `whpk_` and the base64 of the 32-byte Ed25519 public key that verifies\nthe `v1a,` signatures. Not a secret: shown on every read.',
    )
    signature_scheme: WebhookSignatureScheme
    updated_at: AwareDatetime
    url: str


class WebhookViewEnvelope(BaseModel):
    data: WebhookView
    success: bool


class AuditLogEntry(BaseModel):
    action: str
    balance_consumed_usd: float
    created_at: str = Field(..., description='RFC 3339 UTC, milliseconds.')
    credits_consumed: float
    detail_hash: str | None = Field(
        None,
        description='The digest (hex) of the entry\'s detail, among the fields its chain `hash` covers\n(docs/API.md, "Per-tenant chain"): keyed with the entry\'s `detail_salt` on a sealed\nentry (rule v3), blake3 of its canonical detail on one written before sealing (rule\nv2); null on entries written before the detail was hashed, whose `hash` follows rule v1.',
    )
    duration: float | None = Field(None, description='Milliseconds.')
    erased: bool | None = Field(
        None,
        description="`true` when the entry's subject was erased: its personal fields are gone for good and\nshown as null. Absent otherwise.",
    )
    error_code: int | None = None
    error_msg: str | None = None
    gateway_id: str | None = None
    hash: str | None = Field(
        None,
        description='Per-tenant chain hash (hex) for business and custom plans; null otherwise.',
    )
    http_status: conint(ge=0)
    id: str
    ip_address: str | None = None
    is_cache_hit: bool
    is_success: bool
    metadata: Any | None = None
    model_id: str | None = None
    project_id: str | None = None
    sealed: bool | None = Field(
        None,
        description="`true` on an entry whose personal fields (`ip_address`, `user_agent`, `error_msg`,\n`metadata` and the detail) are stored sealed under its subjects' keys: its `hash`\nfollows tenant chain rule v3, which leaves those fields out. Absent on entries that\npredate encryption.",
    )
    tokens: Tokens | None = None
    user_agent: str | None = None


class AuditLogPage(BaseModel):
    logs: list[AuditLogEntry]
    next_cursor: str | None = None
    page: conint(ge=0)
    page_size: conint(ge=0)
    total: conint(ge=0)


class AuditLogPageEnvelope(BaseModel):
    code: int = Field(..., description='1000')
    data: AuditLogPage
    message: str
    success: bool


class BatchDeleteRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    filters: dict[str, Any] | None = Field(
        None,
        description='A filter (see `POST /v1/memories/query`); superseded memories it matches go too.',
    )
    memory_type: MemoryTypeName | None = None


class BatchDeleted(BaseModel):
    deleted: conint(ge=0)
    memory_type: MemoryTypeName | None = None


class BatchDeletedEnvelope(BaseModel):
    data: BatchDeleted
    success: bool


class CreateKeyRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: constr(pattern=r'\S', min_length=1, max_length=200) | None = None
    permissions: list[PermissionName] = Field(..., min_length=1)
    scope: KeyScopeRequest | None = None


class CreateTenantRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    credits: confloat(ge=0.0) | None = Field(None, description='Default 0.')
    name: constr(pattern=r'\S', min_length=1, max_length=200) = Field(
        ..., description='1 to 200 characters after trimming.'
    )
    plan: PlanName
    subscription_active: bool | None = Field(None, description='Default true.')


class CreateWebhook(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    audit_actions: list[str] | None = Field(
        None,
        description='`audit.entry` only for entries with one of these actions (at most 32; every action when\nabsent or empty).',
    )
    enabled: bool | None = Field(
        None, description='Whether events are sent (default true).'
    )
    event_types: list[WebhookEventType] = Field(
        ..., description='The events sent: at least one, each named once.'
    )
    signature_scheme: WebhookSignatureScheme | None = Field(
        None,
        description="How deliveries are signed: `hmac-sha256` (the default; a `whsec_` secret is answered)\nor `ed25519` (a `whpk_` public key is answered). Fixed for the endpoint's life.",
    )
    url: str = Field(
        ...,
        description='Where events are posted: `https://...` (at most 2048 characters). A plain `http://` URL,\nor a host on a private, loopback or link-local address, only where the operator allows\nit (`--webhooks-allow-private-targets`).',
    )


class DeliveryView(BaseModel):
    attempts: conint(ge=0)
    created_at: AwareDatetime
    error: str | None = Field(None, description='Why the last attempt got no answer.')
    event_type: WebhookEventType
    id: UUID
    next_try: AwareDatetime | None = None
    position: conint(ge=0) = Field(
        ...,
        description='The log position of the event (its `webhook-id` is `msg_<endpoint>_<position>`).',
    )
    redelivery_of: UUID | None = Field(
        None, description='The delivery this one sends again, for a redelivery.'
    )
    response_excerpt: str | None = Field(
        None, description="At most the first 1024 bytes of the last answer's body."
    )
    response_status: conint(ge=0) | None = Field(
        None, description='The HTTP status of the last answer.'
    )
    status: str = Field(
        ...,
        description='`pending` (to be tried at `next_try`), `delivered` or `failed` (no more tries).',
    )
    updated_at: AwareDatetime


class DeliveryViewEnvelope(BaseModel):
    data: DeliveryView
    success: bool


class ErasureRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    agent_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='An agent scope (1 to 256 characters).'
    )
    memory_ids: list[MemoryId] | None = Field(
        None,
        description='1 to 1000 memories of the tenant (live, or deleted: a delete hides, an erasure forgets).',
        max_length=1000,
        min_length=1,
    )
    session_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='A session scope (1 to 256 characters).'
    )
    user_id: constr(min_length=1, max_length=256) | None = Field(
        None,
        description='Every memory of this user scope and every audit entry that shows one (1 to 256\ncharacters).',
    )


class ExportTask(BaseModel):
    completed_at: str | None = None
    created_at: str
    download_url: str | None = None
    end_time: str
    error: str | None = None
    estimated_records: conint(ge=0)
    expires_at: str | None = None
    export_id: str
    file_blake3: str | None = None
    file_size: conint(ge=0) | None = None
    format: str
    manifest: Manifest | None = None
    records: conint(ge=0) | None = None
    start_time: str
    status: str = Field(..., description='processing, completed, failed or expired.')


class ExportTaskEnvelope(BaseModel):
    code: int = Field(..., description='1000')
    data: ExportTask
    message: str
    success: bool


class ExtractRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    agent_id: constr(min_length=1, max_length=256) | None = None
    deduplicate: bool | None = Field(None, description='Default false.')
    messages: list[GivenMessage] | None = Field(None, min_length=1)
    metadata: dict[str, Any] | None = None
    occurred_at: str | None = Field(
        None,
        description='ISO 8601: when the conversation or text took place, given to every memory extracted\nbut one drawn from messages that give their own `occurred_at`.',
    )
    resolve: bool | None = Field(
        None,
        description='Default false. True: each memory found supersedes the stored ones of its scope it\ncontradicts, and one equal in meaning to a stored one is skipped (`skipped`).',
    )
    session_id: constr(min_length=1, max_length=256) | None = None
    text: constr(pattern=r'\S', min_length=1) | None = None
    user_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='Given to every memory extracted.'
    )


class IngestEntry(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    action: str
    balance_consumed_usd: float | None = None
    created_at: str | None = None
    credits_consumed: float | None = None
    duration: float | None = None
    error_code: int | None = None
    error_msg: str | None = None
    gateway_id: str | None = None
    http_status: conint(ge=100, le=599)
    input_content: Any | None = None
    ip_address: str | None = None
    is_cache_hit: bool | None = None
    metadata: Any | None = None
    model_id: str | None = None
    output_content: Any | None = None
    project_id: str | None = None
    rag_query: list[str] | None = None
    rag_results: list[Any] | None = None
    request_body: Any | None = None
    response_body: Any | None = None
    tenant_id: str
    tokens: Tokens | None = None
    user_agent: str | None = None


class IngestRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    entries: list[IngestEntry] = Field(..., max_length=1000, min_length=1)


class IssuedKey(BaseModel):
    api_key: str
    created_at: str
    id: str
    name: str | None = None
    permissions: list[PermissionName]
    scope: KeyScopeAnswer | None = None
    tenant_id: str


class IssuedKeyEnvelope(BaseModel):
    data: IssuedKey
    success: bool


class Memory(BaseModel):
    agent_id: str | None = None
    as_of: AsOfShown | None = None
    content: str
    created_at: str
    expires_at: str | None = None
    id: str
    importance: float
    memory_type: MemoryTypeName
    metadata: dict[str, Any] | None = None
    occurred_at: str | None = Field(
        None,
        description='When what it says happened or was said, as the caller gave it; absent when not given.',
    )
    resolution: MemoryResolution | None = None
    session_id: str | None = None
    superseded_at: str | None = None
    superseded_by: str | None = Field(
        None, description='The newer memory that contradicted this one.'
    )
    updated_at: str
    user_id: str | None = None


class MemoryBatch(BaseModel):
    memories: list[Memory]


class MemoryBatchEnvelope(BaseModel):
    data: MemoryBatch
    success: bool


class MemoryCreateRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    agent_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='The agent the memory belongs to (1 to 256 characters).'
    )
    content: constr(pattern=r'\S', min_length=1, max_length=10000) = Field(
        ..., description='1 to 10,000 characters after trimming.'
    )
    expires_at: str | None = Field(
        None,
        description='ISO 8601, in the future: from then on the memory is gone from get, list and search.',
    )
    importance: confloat(ge=0.0, le=1.0) | None = Field(
        None, description='0.0 to 1.0, default 0.5.'
    )
    memory_type: MemoryTypeName
    metadata: dict[str, Any] | None = Field(
        None, description='A JSON object, at most 8192 bytes as JSON and 5 levels deep.'
    )
    occurred_at: str | None = Field(
        None,
        description="ISO 8601, past or future: when what the memory says happened or was said (a\nconversation turn's time). Shown in answers, filtered on as `occurred_at`, and matched\nby a hybrid search whose query names a date (docs/SEARCH.md).",
    )
    resolve: bool | None = Field(
        None,
        description='Default false. True: a stored memory of the same scope this one contradicts is\nsuperseded by it, and if one equal in meaning is stored this one is not (see\n`resolution` in the answer). Not taken by batches.',
    )
    session_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='The session the memory came from (1 to 256 characters).'
    )
    user_id: constr(min_length=1, max_length=256) | None = Field(
        None, description='The end user the memory is about (1 to 256 characters).'
    )


class MemoryEnvelope(BaseModel):
    data: Memory
    success: bool


class MemoryHistory(BaseModel):
    as_of: AsOfShown | None = None
    deleted: bool
    erased: bool | None = Field(
        None,
        description='The memory was erased (it is then deleted too). Absent (false) otherwise.',
    )
    id: str
    versions: list[MemoryVersion]


class MemoryHistoryEnvelope(BaseModel):
    data: MemoryHistory
    success: bool


class MemoryPage(BaseModel):
    as_of: AsOfShown | None = None
    memories: list[Memory]
    page: conint(ge=0)
    page_size: conint(ge=0)
    total: conint(ge=0)


class MemoryPageEnvelope(BaseModel):
    data: MemoryPage
    success: bool


class MemoryQueryRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    as_of: dict[str, Any] | None = Field(
        None,
        description='A log position or an RFC 3339 time: the answer as the store stood right after it\n(docs/API.md, "Reading the past").',
    )
    filters: dict[str, Any] | None = None
    include_superseded: bool | None = Field(
        None, description='Default false: memories another superseded are left out.'
    )
    memory_type: MemoryTypeName | None = None
    page: conint(ge=1) | None = Field(None, description='Default 1.')
    page_size: conint(ge=1) | None = Field(
        None, description='Default 20, above 100 clamped.'
    )


class SearchEnvelope(BaseModel):
    data: SearchResults
    success: bool


class UpdateWebhook(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    audit_actions: list[str] | None = None
    enabled: bool | None = Field(
        None,
        description='Enabling a disabled endpoint sends what it missed, from the first event not delivered.',
    )
    event_types: list[WebhookEventType] | None = None
    url: str | None = None


class WebhookCreated(WebhookView):
    secret: str | None = Field(
        None,
        description='`hmac-sha256` only: `whsec_` and the base64 of 32 random bytes, the Standard Webhooks\nsecret that signs every delivery. Shown once. An `ed25519` endpoint has no secret to\nshow (its private key never leaves the service): it answers `public_key` instead.',
    )


class WebhookCreatedEnvelope(BaseModel):
    data: WebhookCreated
    success: bool


class WebhookList(BaseModel):
    webhooks: list[WebhookView]


class WebhookListEnvelope(BaseModel):
    data: WebhookList
    success: bool


class AuditLogDetail(AuditLogEntry):
    detail_salt: str | None = Field(
        None,
        description="On a sealed entry not erased: the 32-byte salt (hex) its `detail_hash` is keyed with,\n`blake3::keyed_hash(salt, canonical personal fields)` (tenant chain rule v3), so this\nread can be checked against the chain. Absent otherwise: an erased entry's salt is\ngone with its key.",
    )
    input_content: Any | None = None
    memory_query: list[str] | None = None
    memory_results: list[Any] | None = None
    output_content: Any | None = None
    rag_query: list[str] | None = None
    rag_results: list[Any] | None = None
    request_body: Any | None = None
    response_body: dict[str, Any] | None = Field(
        None,
        description='The body the caller received: the JSON text as sent when it was within the audit body\nlimit (or recorded by reference), else a marker.',
    )
    response_ref: dict[str, Any] | None = Field(
        None,
        description='For an audit list or detail read, what its response was recorded as instead of its\nbody (`response_body` is rendered from it); it is what `detail_hash` covers in place of\n`response_body`. Null for every other entry.',
    )


class AuditLogDetailEnvelope(BaseModel):
    code: int = Field(..., description='1000')
    data: AuditLogDetail
    message: str
    success: bool


class DeliveryList(BaseModel):
    deliveries: list[DeliveryView]


class DeliveryListEnvelope(BaseModel):
    data: DeliveryList
    success: bool


class Extracted(BaseModel):
    credits_consumed: float
    memories: list[Memory]
    skipped: list[SkippedMemory]
    skipped_messages: list[SkippedMessage] = Field(
        ...,
        description='The messages not read, each with its index and why (an unknown role); empty for a\ntext.',
    )


class MemoryBatchCreateRequest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    memories: list[MemoryCreateRequest] = Field(
        ...,
        description='1 to 100 items, each a `MemoryCreateRequest`.',
        max_length=100,
        min_length=1,
    )


class ExtractEnvelope(BaseModel):
    data: Extracted
    success: bool
