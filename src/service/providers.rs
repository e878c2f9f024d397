//! The providers a service runs with: the embedder, the extractor and the resolver.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::{EmbedderKind, ExtractorKind, ServeArgs};
use crate::embed::{EmbedService, EmbedServiceConfig, Embedder};
use crate::extract::{Extractor, Resolver};

/// The embedder, the extractor, and what decides conflicts (`resolve: true`).
pub struct Providers {
    pub embed: EmbedService,
    pub extractor: Arc<dyn Extractor>,
    pub resolver: Arc<dyn Resolver>,
}

impl Providers {
    /// The providers the configuration asks for; a missing model is an error that names the
    /// set-up command (nothing is fetched at run time). The HTTP providers hold blocking
    /// clients, so call this off the async runtime.
    pub fn load(args: &ServeArgs) -> anyhow::Result<Providers> {
        let timeout = Duration::from_secs(args.provider_timeout_secs.max(1));
        let roots = crate::http_client::ExtraRoots::load(args.provider_ca_file.as_deref())
            .map_err(|e| anyhow::anyhow!("--provider-ca-file: {e}"))?;
        let (embedder, batches): (Arc<dyn Embedder>, _) = match args.embedder {
            EmbedderKind::Minilm => (
                Arc::new(
                    crate::embed::MiniLm::load(&args.model_dir)
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                ),
                EmbedServiceConfig::default(),
            ),
            EmbedderKind::Openai => {
                let url = args
                    .embed_url
                    .clone()
                    .context("--embedder openai needs --embed-url")?;
                let mut cfg = crate::embed::OpenAiEmbedConfig::new(url, args.embed_model.clone());
                cfg.api_key = args.embed_api_key.clone();
                cfg.timeout = timeout;
                cfg.roots = roots.clone();
                (
                    Arc::new(
                        crate::embed::OpenAiEmbedder::new(cfg)
                            .map_err(|e| anyhow::anyhow!("{e}"))?,
                    ),
                    EmbedServiceConfig::remote(),
                )
            }
        };
        let embed =
            EmbedService::with_config(embedder, batches).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (extractor, resolver): (Arc<dyn Extractor>, Arc<dyn Resolver>) = match args.extractor {
            ExtractorKind::Rules => (
                Arc::new(crate::extract::RuleExtractor::new()),
                Arc::new(crate::extract::RuleResolver),
            ),
            ExtractorKind::Openai => {
                let url = args
                    .extract_url
                    .clone()
                    .context("--extractor openai needs --extract-url")?;
                let mut cfg =
                    crate::extract::OpenAiChatConfig::new(url, args.extract_model.clone());
                cfg.api_key = args.extract_api_key.clone();
                cfg.timeout = timeout;
                cfg.roots = roots;
                (
                    Arc::new(
                        crate::extract::OpenAiChatExtractor::new(cfg.clone())
                            .map_err(|e| anyhow::anyhow!("{e}"))?,
                    ),
                    Arc::new(
                        crate::extract::ChatConflictJudge::new(cfg)
                            .map_err(|e| anyhow::anyhow!("{e}"))?,
                    ),
                )
            }
        };
        Ok(Providers {
            embed,
            extractor,
            resolver,
        })
    }
}
