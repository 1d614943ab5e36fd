//! The agent's own model as the summarizer, reached through the client that drives the
//! session.
//!
//! `soba proxy` holds the credentials of the request it is serving, and the pi extension holds
//! pi's model and key; neither hands them to the daemon. A client that can summarize says so at
//! `initialize` ([`SummarizeCapability`]); when one of its own requests starts a compaction in a
//! session whose config names no summarizer, the daemon writes the prompts (SOBA's prompt, the
//! facts, the history in chunks that fit) and sends each to the client as `soba/summarize`. The
//! client runs it on its model and answers with the text; the daemon validates it as it
//! validates any model's reply. The compaction's timeout, cancellation, circuit breaker and the
//! local fallback are the same as for a configured summarizer; a request the daemon stops
//! waiting for is cancelled with `$/cancelRequest`, so the client aborts its model request.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc::{self, Id};
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::Client;

use super::protocol::{client_method, SummarizeCapability, SummarizeParams, SummarizeResult};
use crate::summarize::breaker::Breaker;
use crate::summarize::client::{run_chunked, PromptSender, RunLimits, DEFAULT_MAX_OUTPUT_TOKENS};
use crate::summarize::prompt::{Prompt, SIZING_TOKENIZER};
use crate::summarize::summarizer::Summarizer;
use crate::summarize::summarizer::SummaryError;
use crate::summarize::summarizer::SummaryRequest;
use crate::wire::summary::Reply;
use soba_core::config::ModelDef;
use soba_core::session::capsule::model::CapsuleState;

/// A connection that offered its model, as a request of that connection carries it to the
/// session it addresses.
#[derive(Clone)]
pub struct ClientModel {
    client: Client,
    capability: SummarizeCapability,
    /// The client's name from `initialize` (`clientInfo.name`), for status lines.
    client_name: String,
    /// Cancelled when the client's input ends: no answer of its can arrive after that.
    input_ended: CancellationToken,
}

impl std::fmt::Debug for ClientModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientModel")
            .field("capability", &self.capability)
            .field("client_name", &self.client_name)
            .finish_non_exhaustive()
    }
}

impl ClientModel {
    pub fn new(
        client: Client,
        capability: SummarizeCapability,
        client_name: String,
        input_ended: CancellationToken,
    ) -> Self {
        ClientModel {
            client,
            capability,
            client_name,
            input_ended,
        }
    }

    /// What the budget's `summarizer.uses` says for a session whose model is `model`.
    pub fn describe(&self, session_model: &str) -> String {
        let model = self.capability.model.as_deref().unwrap_or(session_model);
        format!("the agent's model ({model}) through {}", self.client_name)
    }

    /// The summarizer of one compaction of `session_id`, sized for `model` unless the client
    /// named its own window.
    pub fn summarizer(
        &self,
        session_id: &str,
        operation_id: &str,
        model: &ModelDef,
        breaker: Arc<Breaker>,
    ) -> ClientSummarizer {
        let max_output_tokens = self
            .capability
            .max_output_tokens
            .unwrap_or_else(|| model.max_output_tokens.min(DEFAULT_MAX_OUTPUT_TOKENS))
            .max(1);
        let context_window = self
            .capability
            .context_window
            .unwrap_or(model.context_window);
        ClientSummarizer {
            described: self.describe(&model.name),
            model: self.clone(),
            session_id: session_id.to_string(),
            operation_id: operation_id.to_string(),
            limits: RunLimits {
                context_window,
                max_output_tokens,
                output_setting: "the client's maxOutputTokens",
            },
            breaker,
        }
    }
}

/// Read a client's offer from its `initialize` params; `None` when it made none. An offer of
/// the wrong shape is no offer.
pub fn capability_of(initialize_params: &Value) -> Option<SummarizeCapability> {
    let offer = initialize_params.pointer(super::protocol::SUMMARIZE_CAPABILITY_POINTER)?;
    match offer {
        Value::Bool(true) => Some(SummarizeCapability::default()),
        Value::Object(_) => serde_json::from_value(offer.clone()).ok(),
        _ => None,
    }
}

/// One compaction's summarizer over a client's model.
pub struct ClientSummarizer {
    model: ClientModel,
    session_id: String,
    operation_id: String,
    limits: RunLimits,
    described: String,
    /// The session's breaker for runs on client models, so that consecutive failures count
    /// across compactions.
    breaker: Arc<Breaker>,
}

enum CancelRequest {}
impl Notification for CancelRequest {
    type Params = Value;
    const METHOD: &'static str = "$/cancelRequest";
}

/// Tells the client to stop a request the daemon no longer waits for.
struct CancelOnDrop {
    client: Client,
    id: Option<Id>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let client = self.client.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                client
                    .send_notification::<CancelRequest>(json!({ "id": id }))
                    .await;
            });
        }
    }
}

impl PromptSender for ClientSummarizer {
    fn send<'a>(
        &'a self,
        prompt: &'a Prompt,
        on_tokens: &'a (dyn Fn(u64) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, SummaryError>> {
        Box::pin(async move {
            let params = SummarizeParams {
                session_id: self.session_id.clone(),
                operation_id: self.operation_id.clone(),
                system: prompt.system.clone(),
                user: prompt.user.clone(),
                max_output_tokens: self.limits.max_output_tokens,
                model: self.model.capability.model.clone(),
            };
            let mut client = self.model.client.clone();
            let id = client.next_request_id();
            let request = jsonrpc::Request::build(client_method::SUMMARIZE)
                .id(id.clone())
                .params(serde_json::to_value(params).expect("params serialize"))
                .finish();
            let mut guard = CancelOnDrop {
                client: client.clone(),
                id: Some(id),
            };
            let call = tower_service::Service::call(&mut client, request);
            let gone = || {
                SummaryError::Transport(format!(
                    "{} closed its connection before it answered",
                    self.model.client_name
                ))
            };
            let answer = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
                _ = self.model.input_ended.cancelled() => return Err(gone()),
                a = call => a,
            };
            guard.id = None;
            let Ok(Some(response)) = answer else {
                return Err(gone());
            };
            match response.into_parts().1 {
                Ok(result) => {
                    let result: SummarizeResult = serde_json::from_value(result).map_err(|e| {
                        SummaryError::InvalidResponse(format!(
                            "{}'s answer to {} is not {{\"text\": …}}: {e}",
                            self.model.client_name,
                            client_method::SUMMARIZE
                        ))
                    })?;
                    on_tokens(SIZING_TOKENIZER.count(&result.text));
                    Ok(Reply {
                        text: result.text,
                        hit_output_limit: result.hit_output_limit,
                    })
                }
                Err(error) => Err(client_error(&self.model.client_name, error)),
            }
        })
    }
}

/// A client's error answer: the provider's HTTP status when it passed one on, else its
/// message.
fn client_error(client_name: &str, error: jsonrpc::Error) -> SummaryError {
    let status = error
        .data
        .as_ref()
        .and_then(|d| d.get("status"))
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    let message = soba_core::redact::redact(&error.message).into_owned();
    match status {
        Some(status) => SummaryError::Http { status, message },
        None if error.code == jsonrpc::ErrorCode::RequestCancelled => SummaryError::Cancelled,
        None => SummaryError::Provider(format!("{client_name}: {message}")),
    }
}

impl Summarizer for ClientSummarizer {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        Box::pin(async move {
            // The agent's model has seen this history already: nothing is redacted from it.
            let outgoing = |text: String| text;
            run_chunked(req, self.limits, &outgoing, self, progress, &cancel).await
        })
    }

    fn breaker(&self) -> Option<&Breaker> {
        Some(&self.breaker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offer_is_read_from_experimental_capabilities() {
        let p = json!({"capabilities": {"experimental": {"soba": {"summarize": {"model": "m", "contextWindow": 8000}}}}});
        assert_eq!(
            capability_of(&p),
            Some(SummarizeCapability {
                model: Some("m".into()),
                context_window: Some(8000),
                max_output_tokens: None,
            })
        );
        let p = json!({"capabilities": {"experimental": {"soba": {"summarize": true}}}});
        assert_eq!(capability_of(&p), Some(SummarizeCapability::default()));
        for none in [
            json!({"capabilities": {}}),
            json!({"capabilities": {"experimental": {"soba": {"summarize": false}}}}),
            json!({"capabilities": {"experimental": {"soba": {"summarize": {"contextWindow": "big"}}}}}),
        ] {
            assert_eq!(capability_of(&none), None, "{none}");
        }
    }

    #[test]
    fn a_client_error_keeps_the_status_and_loses_secrets() {
        let e = jsonrpc::Error {
            code: jsonrpc::ErrorCode::ServerError(-32000),
            message:
                "upstream said: invalid key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                    .into(),
            data: Some(json!({"status": 401})),
        };
        match client_error("soba-proxy", e) {
            SummaryError::Http { status, message } => {
                assert_eq!(status, 401);
                assert!(!message.contains("AAAAAAAA"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let e = jsonrpc::Error {
            code: jsonrpc::ErrorCode::ServerError(-32000),
            message: "no model".into(),
            data: None,
        };
        assert_eq!(
            client_error("pi", e).to_string(),
            "the summarization model reported an error: pi: no model"
        );
    }
}
