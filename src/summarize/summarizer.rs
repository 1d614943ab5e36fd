//! What a summarizer is: the request it is given, the errors it answers with, and the
//! interface every summarizer (a provider's model, a client's own model) offers.

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::breaker::{Breaker, FAILURE_THRESHOLD};
use super::prompt;
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::view::ModelMessage;

/// Everything a summarizer is given.
#[derive(Debug, Clone, Default)]
pub struct SummaryRequest {
    /// The previous capsule on the branch, rolled forward.
    pub previous: Option<CapsuleEntry>,
    /// The entries being summarized, rendered as model messages, oldest first.
    pub history: Vec<ModelMessage>,
    /// Custom instructions of an explicit `/compact`.
    pub instructions: Option<String>,
    /// Facts from the log; shown to the model (those of the summarized history and the
    /// previous capsule, see [`prompt::shown_artifacts`]), never changed by it.
    pub artifacts: Artifacts,
    /// What was wrong with the model's previous reply, when the request is sent again.
    pub follow_up: Option<String>,
}

impl SummaryRequest {
    /// The facts of the history the model is given beside the artifacts, sized for a
    /// summarizer whose input window is `window` tokens.
    pub fn facts(&self, window: u64) -> prompt::HistoryFacts {
        prompt::HistoryFacts::within(&self.history, prompt::FactBudget::for_window(window))
    }

    /// [`SummaryRequest::facts`] with each message passed through `clean` (redaction) before
    /// it is shortened.
    pub fn facts_after(
        &self,
        window: u64,
        clean: &(dyn Fn(String) -> String + Send + Sync),
    ) -> prompt::HistoryFacts {
        prompt::HistoryFacts::within_after(
            &self.history,
            prompt::FactBudget::for_window(window),
            clean,
        )
    }

    /// What the agent was doing when the history ends, from its calls after the last user
    /// message and what they printed.
    pub fn current_work(&self) -> Vec<String> {
        let after_request = self
            .history
            .iter()
            .rposition(|m| {
                m.role == "user"
                    && soba_core::capsule::requests::typed_text(
                        &soba_core::session::entry::blocks_text(&m.content),
                    )
                    .is_some()
            })
            .map_or(0, |at| at + 1);
        prompt::current_work_of(&self.history[after_request..])
    }

    /// The artifacts the model is shown: none it cannot see in the history or the previous
    /// capsule.
    pub fn shown_artifacts(&self) -> Artifacts {
        prompt::shown_artifacts(
            &self.artifacts,
            &self.history,
            self.previous.as_ref().map(|c| &c.artifacts),
        )
    }
}

/// Why a model run produced no capsule state. Messages never contain the API key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error("the summarization model did not finish within {after_ms} ms")]
    Timeout { after_ms: u64 },
    #[error("summarization was cancelled")]
    Cancelled,
    #[error("the summarization model answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("could not talk to the summarization model: {0}")]
    Transport(String),
    #[error("the summarization model's stream ended before the reply was complete")]
    Truncated,
    #[error("the summarization model reported an error: {0}")]
    Provider(String),
    #[error("invalid reply from the summarization model: {0}")]
    InvalidResponse(String),
    #[error("{0}")]
    WindowTooSmall(String),
    #[error("the summarization model is paused after {FAILURE_THRESHOLD} consecutive failures; it is tried again in {retry_in_ms} ms")]
    BreakerOpen { retry_in_ms: u64 },
}

/// Something that writes a capsule's narrative state.
pub trait Summarizer: Send + Sync {
    /// Provider, model and endpoint, for logs and status lines; never the key.
    fn describe(&self) -> String;

    /// Summarize `req`. `progress` receives percentages in 0..=99 as the reply streams in; the
    /// run stops (dropping its connection) when `cancel` fires or the future is dropped.
    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>>;

    /// The circuit breaker guarding this summarizer, when it has one.
    fn breaker(&self) -> Option<&Breaker> {
        None
    }
}

/// Why a summarizer configuration cannot be used. Names settings and variables, never values
/// of secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummarizerConfigError {
    #[error("summarizer.provider is `local`: the local builder needs no model summarizer")]
    LocalProvider,
    #[error("summarizer.model is required when summarizer.provider is `{provider}`")]
    MissingModel { provider: &'static str },
    #[error("summarizer.apiKeyEnv is required when summarizer.provider is `anthropic`: name the environment variable that holds the API key")]
    MissingApiKeyEnv,
    #[error("the environment variable `{var}` named by summarizer.apiKeyEnv is not set or empty; export it, or change summarizer.apiKeyEnv")]
    MissingApiKey { var: String },
    #[error("the environment variable `{var}` named by summarizer.apiKeyEnv was not passed by the client that opened this session: `soba serve` passes only the variables that its user config, --config file or trusted workspace config name, and only when they are set; export `{var}` and name it in one of those files, then restart the client")]
    KeyNotPassed { var: String },
    #[error("summarizer.baseUrl `{url}` is not usable: {message}")]
    BadBaseUrl { url: String, message: String },
    #[error("summarizer.{key} = {value} is invalid: {allowed}")]
    OutOfRange {
        key: &'static str,
        value: u64,
        allowed: String,
    },
    #[error("cannot set up the HTTP client for the summarizer: {0}")]
    Client(String),
}
