//! auditmem's integration tests, one binary: linked once, and each module a group of tests.
//!
//! Black-box modules start the real `auditmem` binary on a loopback port (`common::Server`)
//! and speak HTTP to it, or run its CLI; `properties` and the provider modules test the
//! library's parts directly. Select a group with `cargo test --test it <module>::`.

mod candle_reference;
mod common;

mod admin_auth;
mod api_errors;
mod audit_api;
mod audit_sealed;
mod auth;
mod ci_setup;
mod cli_admin;
mod cluster;
mod console;
mod crash;
mod crash_cycles;
mod disk_full;
mod edge;
mod embed_model;
mod embed_openai;
mod entry_integrity;
mod erasure;
mod erasure_crash;
mod export;
mod export_disk;
mod export_quota;
mod export_verify;
mod extract_fair;
mod extract_providers;
mod extract_server;
mod extract_transcripts;
mod first_run;
mod forget;
mod isolation;
mod keys;
mod limits;
mod list_bound;
mod locomo_eval;
mod mcp;
mod mem0_compat;
mod memory_api;
mod memory_as_of;
mod memory_batch;
mod memory_hybrid;
mod memory_occurred;
mod memory_resolve;
mod memory_scopes;
mod memory_sealed;
mod ocsf;
mod old_data_dir;
mod openapi;
mod positions;
mod properties;
mod provider_tls;
mod python_sdk;
mod readme_tour;
mod replay;
mod secrets;
mod stream;
mod tamper;
mod tlog;
mod webhooks;
mod witness;
