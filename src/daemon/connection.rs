//! A connection's own configuration.
//!
//! Every `soba serve` relays to the one shared daemon of its user, and that daemon was started
//! by whichever `soba serve` came first, with that one's `--config` and environment. So each
//! relay opens its connection with `soba/client/hello`, carrying the text of the config files it
//! loaded (the user's file and its `--config`) and the values of the environment variables
//! those files name in `summarizer.apiKeyEnv`, and no others. Sessions opened on the
//! connection are configured from them (user < workspace < `--config` < session settings) and
//! call the summarizer with those keys.
//!
//! The keys live in memory for the connection's life only: they are never logged or written,
//! and every summarizer built with them is owned here, with sessions holding it weakly, so
//! that when the connection closes the keys go with it. A session it leaves behind builds its
//! capsules locally until a connected client opens it again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::protocol::{code, ConfigText, HelloParams, HelloResult, CLIENT_HELLO};
use crate::summarize::breaker::Breaker;
use crate::summarize::summarizer::Summarizer;
use crate::summarize::summarizer::SummarizerConfigError;
use crate::summarize::summarizer::SummaryError;
use soba_core::config::{
    user_config_path, workspace_config_path, ConfigError, ConfigFile, SummarizerConfig,
};
use soba_core::session::capsule::model::CapsuleState;

/// What one connection's hello handed over.
pub struct ConnectionConfig {
    user: Option<ConfigText>,
    extra: Option<ConfigText>,
    keys: BTreeMap<String, String>,
    /// Summarizers built with `keys`. Sessions hold them weakly (see [`ConnectionBound`]).
    summarizers: Mutex<Vec<Arc<dyn Summarizer>>>,
}

impl std::fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("user", &self.user.as_ref().map(|c| &c.path))
            .field("extra", &self.extra.as_ref().map(|c| &c.path))
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ConnectionConfig {
    pub fn new(hello: HelloParams) -> ConnectionConfig {
        ConnectionConfig {
            user: hello.user_config,
            extra: hello.extra_config,
            keys: hello.env,
            summarizers: Mutex::new(Vec::new()),
        }
    }

    /// The user's file and the `--config` file of the relay, parsed (each named by its path
    /// in errors).
    pub fn files(&self) -> Result<(Option<ConfigFile>, Option<ConfigFile>), ConfigError> {
        let parse = |t: &Option<ConfigText>| {
            t.as_ref()
                .map(|t| ConfigFile::parse(&t.path, &t.text))
                .transpose()
        };
        Ok((parse(&self.user)?, parse(&self.extra)?))
    }

    /// The summarizer `cfg` asks for, with this connection's keys, owned by the connection;
    /// what a session holds of it.
    pub fn summarizer(
        &self,
        cfg: &SummarizerConfig,
    ) -> Result<Option<Arc<ConnectionBound>>, SummarizerConfigError> {
        let Some(owned) = self.own(cfg)? else {
            return Ok(None);
        };
        let cooldown = owned.breaker().map_or(
            std::time::Duration::from_millis(crate::summarize::client::DEFAULT_COOLDOWN_MS),
            Breaker::cooldown,
        );
        Ok(Some(Arc::new(ConnectionBound {
            inner: Mutex::new(Arc::downgrade(&owned)),
            config: cfg.clone(),
            described: owned.describe(),
            breaker: Breaker::new(cooldown),
        })))
    }

    /// Build the summarizer of `cfg` with this connection's keys and keep it.
    fn own(
        &self,
        cfg: &SummarizerConfig,
    ) -> Result<Option<Arc<dyn Summarizer>>, SummarizerConfigError> {
        let built = crate::summarize::from_config_with_env(cfg, |var| self.keys.get(var).cloned())
            .map_err(|e| match e {
                SummarizerConfigError::MissingApiKey { var } => {
                    SummarizerConfigError::KeyNotPassed { var }
                }
                other => other,
            })?;
        let Some(built) = built else {
            return Ok(None);
        };
        let owned: Arc<dyn Summarizer> = Arc::from(built);
        self.summarizers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(owned.clone());
        Ok(Some(owned))
    }
}

/// Why a session's summarizer is gone.
pub const DISCONNECTED: &str = "the client that opened this session disconnected, and the API key it passed went with it; capsules are built locally until a connected client opens the session again";

/// A summarizer owned by a connection, as a session holds it.
pub struct ConnectionBound {
    inner: Mutex<Weak<dyn Summarizer>>,
    /// The session's summarizer settings, to build it again for the next client that opens
    /// the session once this one's client is gone.
    config: SummarizerConfig,
    described: String,
    /// The breaker of the session's runs (the owned summarizer's own is not reachable through
    /// the weak reference); the same cooldown.
    breaker: Breaker,
}

impl std::fmt::Debug for ConnectionBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionBound")
            .field("described", &self.described)
            .finish_non_exhaustive()
    }
}

impl ConnectionBound {
    fn current(&self) -> Option<Arc<dyn Summarizer>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }

    /// When the client that passed the key is gone, take `connection`'s keys instead. `true`
    /// when the summarizer was rebuilt.
    pub fn rebind_if_gone(
        &self,
        connection: &ConnectionConfig,
    ) -> Result<bool, SummarizerConfigError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.upgrade().is_some() {
            return Ok(false);
        }
        match connection.own(&self.config)? {
            Some(owned) => {
                *inner = Arc::downgrade(&owned);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl Summarizer for ConnectionBound {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn summarize<'a>(
        &'a self,
        req: &'a crate::summarize::summarizer::SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        Box::pin(async move {
            let Some(inner) = self.current() else {
                return Err(SummaryError::Provider(DISCONNECTED.into()));
            };
            inner.summarize(req, progress, cancel).await
        })
    }

    fn breaker(&self) -> Option<&Breaker> {
        Some(&self.breaker)
    }
}

/// The connection's hello, as its frame reader sees it: the first frame may be a
/// `soba/client/hello`, answered here; any later one is refused.
pub struct Handshake {
    slot: Arc<OnceLock<Arc<ConnectionConfig>>>,
    /// A frame other than the hello went to the service.
    started: bool,
}

#[derive(Deserialize)]
struct HelloFrame {
    #[serde(default)]
    id: Option<Value>,
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
}

impl Handshake {
    /// A handshake filling `slot`, which the connection's service reads.
    pub fn new(slot: Arc<OnceLock<Arc<ConnectionConfig>>>) -> Handshake {
        Handshake {
            slot,
            started: false,
        }
    }

    /// The response body to a hello frame; `None` for every other frame (it goes on to the
    /// service).
    pub fn answer(&mut self, body: &[u8]) -> Option<Bytes> {
        // Cheap test first: most frames never mention the method, and appends can be large.
        let named = memchr::memmem::find(body, CLIENT_HELLO.as_bytes()).is_some();
        let frame = named
            .then(|| serde_json::from_slice::<HelloFrame>(body).ok())
            .flatten()
            .filter(|f| f.method.as_deref() == Some(CLIENT_HELLO));
        let Some(frame) = frame else {
            self.started = true;
            return None;
        };
        let id = frame.id.clone().unwrap_or(Value::Null);
        let reply = |outcome: Result<Value, (i64, String)>| {
            let v = match outcome {
                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Err((code, message)) => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                }
            };
            Some(Bytes::from(
                serde_json::to_vec(&v).expect("a JSON value serializes"),
            ))
        };
        if self.started || self.slot.get().is_some() {
            return reply(Err((
                code::INVALID_REQUEST,
                format!("{CLIENT_HELLO} must be the first message of a connection, sent once, before `initialize`; open a new connection to hand over another configuration"),
            )));
        }
        let params: HelloParams =
            match serde_json::from_value(frame.params.unwrap_or(Value::Null)) {
                Ok(p) => p,
                // serde's message names the field and the expected type; never a value.
                Err(e) => {
                    return reply(Err((
                        code::INVALID_PARAMS,
                        format!("{CLIENT_HELLO}: invalid params ({e}); send `userConfig` and `extraConfig` as {{\"path\", \"text\"}} and `env` as an object of strings"),
                    )))
                }
            };
        let env: Vec<String> = params.env.keys().cloned().collect();
        let _ = self.slot.set(Arc::new(ConnectionConfig::new(params)));
        reply(Ok(
            serde_json::to_value(HelloResult { env }).expect("a result serializes")
        ))
    }
}

/// The hello a relay sends ([`gather`] with the user config file and the environment of this
/// process).
pub fn gather_own(
    extra_file: Option<&Path>,
    cwd: Option<&Path>,
) -> anyhow::Result<(HelloParams, Vec<String>)> {
    gather(user_config_path().as_deref(), extra_file, cwd, |var| {
        std::env::var(var).ok()
    })
}

/// The hello a relay sends: its user config file, its `--config` file, and the values of the
/// variables named by `summarizer.apiKeyEnv` in those and in the trusted workspace config of
/// `cwd` (read through `env`). A file that does not parse still goes (the daemon reports it
/// when a session opens) but names no variable; `warnings` says so.
pub fn gather(
    user_file: Option<&Path>,
    extra_file: Option<&Path>,
    cwd: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<(HelloParams, Vec<String>)> {
    use anyhow::Context;
    let read = |p: &Path| -> anyhow::Result<ConfigText> {
        let text = soba_core::files::read_regular_to_string(p)
            .with_context(|| format!("cannot read config file {}", p.display()))?;
        Ok(ConfigText {
            path: p.display().to_string(),
            text,
        })
    };
    let user_config = match user_file {
        Some(p) if p.is_file() => Some(read(p)?),
        _ => None,
    };
    let extra_config = extra_file.map(read).transpose()?;
    let mut warnings = Vec::new();
    let mut parsed = |t: &ConfigText| match ConfigFile::parse(&t.path, &t.text) {
        Ok(f) => Some(f),
        Err(e) => {
            warnings.push(format!("{e}; no API key is passed for it"));
            None
        }
    };
    let user = user_config.as_ref().and_then(&mut parsed);
    let extra = extra_config.as_ref().and_then(&mut parsed);
    let workspace = cwd.and_then(|ws| {
        // Never through a link; the daemon's own read says why.
        soba_core::config::refuse_links_to_workspace_config(ws).ok()?;
        let p = workspace_config_path(ws);
        let text = soba_core::files::read_regular_to_string(&p).ok()?;
        let file = ConfigFile::parse(&p.display().to_string(), &text).ok()?;
        soba_core::trust::is_trusted(user.as_ref(), ws).then_some(file)
    });
    let mut names: Vec<&str> = [&user, &workspace, &extra]
        .into_iter()
        .flatten()
        .filter_map(|f| f.summarizer.as_ref()?.api_key_env.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    let env = names
        .into_iter()
        .filter_map(|n| {
            env(n)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (n.to_string(), v))
        })
        .collect();
    Ok((
        HelloParams {
            user_config,
            extra_config,
            env,
        },
        warnings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello_frame(id: i64, params: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": CLIENT_HELLO, "params": params}),
        )
        .unwrap()
    }

    #[test]
    fn the_first_hello_is_answered_and_kept_and_a_later_one_is_refused() {
        let slot = Arc::new(OnceLock::new());
        let mut h = Handshake::new(slot.clone());
        let answer = h
            .answer(&hello_frame(1, json!({"env": {"K": "sk-secret"}})))
            .expect("answered here");
        let v: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["result"]["env"], json!(["K"]));
        assert!(!String::from_utf8_lossy(&answer).contains("sk-secret"));
        let kept = slot.get().expect("kept");
        assert_eq!(kept.keys.get("K").map(String::as_str), Some("sk-secret"));
        assert!(
            !format!("{kept:?}").contains("sk-secret"),
            "Debug hides values"
        );

        let init = br#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#;
        assert!(h.answer(init).is_none(), "other frames go to the service");
        let late = h.answer(&hello_frame(3, json!({}))).expect("refused here");
        let v: Value = serde_json::from_slice(&late).unwrap();
        assert_eq!(v["error"]["code"], code::INVALID_REQUEST);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("first message"));
    }

    #[test]
    fn a_hello_after_another_frame_is_refused() {
        let mut h = Handshake::new(Arc::new(OnceLock::new()));
        let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert!(h.answer(init).is_none());
        assert!(h.answer(&hello_frame(2, json!({}))).is_some());
    }

    #[test]
    fn bad_hello_params_get_an_error_without_the_values() {
        let slot = Arc::new(OnceLock::new());
        let mut h = Handshake::new(slot.clone());
        let answer = h
            .answer(&hello_frame(
                1,
                json!({"env": {"K": 7}, "userConfig": "sk-oops"}),
            ))
            .unwrap();
        let v: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["error"]["code"], code::INVALID_PARAMS);
        assert!(!v.to_string().contains("sk-oops"), "{v}");
        assert!(slot.get().is_none());
    }

    #[test]
    fn only_the_variables_named_by_api_key_env_are_gathered() {
        let dir = tempfile::tempdir().unwrap();
        let extra = dir.path().join("extra.json");
        std::fs::write(
            &extra,
            r#"{"summarizer":{"provider":"openai","model":"m","apiKeyEnv":"MY_KEY"}}"#,
        )
        .unwrap();
        let env = |n: &str| match n {
            "MY_KEY" => Some("sk-mine".to_string()),
            "OTHER_SECRET" => Some("nope".to_string()),
            _ => None,
        };
        let (hello, warnings) = gather(None, Some(&extra), None, env).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            hello.env,
            BTreeMap::from([("MY_KEY".to_string(), "sk-mine".to_string())])
        );
        assert!(hello.extra_config.unwrap().text.contains("MY_KEY"));
    }

    #[test]
    fn an_untrusted_workspace_names_no_variable_and_a_broken_file_is_still_sent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
        std::fs::write(
            dir.path().join(".soba/config.json"),
            r#"{"summarizer":{"provider":"openai","model":"m","apiKeyEnv":"AWS_SECRET_ACCESS_KEY"}}"#,
        )
        .unwrap();
        let extra = dir.path().join("extra.json");
        std::fs::write(&extra, r#"{"compaction":{"auto":"yes"}}"#).unwrap();
        let env = |_: &str| Some("secret".to_string());
        let (hello, warnings) = gather(None, Some(&extra), Some(dir.path()), env).unwrap();
        assert!(hello.env.is_empty(), "{:?}", hello.env.keys());
        assert!(hello.extra_config.is_some(), "sent, to be reported at open");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("compaction.auto"), "{warnings:?}");
    }

    #[test]
    fn a_missing_config_file_is_an_error_that_names_it() {
        let err = gather(
            None,
            Some(Path::new("/nonexistent/soba.json")),
            None,
            |_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/soba.json"), "{err}");
    }
}
