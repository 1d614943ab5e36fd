//! `soba import` on every real transcript in `../shared/fixtures/transcripts`, with counts
//! computed here from the raw files, then `soba budget` and `soba context` on the result; and the
//! command's failure paths on small inline files.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn soba(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .output()
        .expect("the soba binary runs")
}

fn stdout_json(out: &Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Counts taken from a transcript directly, independent of the importer.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    format: &'static str,
    tool_calls: usize,
    tool_results: usize,
    foreign_compactions: usize,
    corrupt_lines: usize,
    /// Provider usage records, where the raw file says how many there are (Claude Code: one
    /// per response id, however many records repeat it).
    usage_records: Option<usize>,
}

/// Distinct response ids (`message.id`) whose records carry nonzero usage.
fn claude_responses_with_usage(records: &[Value]) -> usize {
    let keys = [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ];
    records
        .iter()
        .filter(|r| r["type"] == "assistant" && nonzero_usage(&r["message"]["usage"], &keys))
        .map(|r| r["message"]["id"].to_string())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

fn nonzero_usage(u: &Value, keys: &[&str]) -> bool {
    keys.iter().any(|k| u[*k].as_u64().is_some_and(|n| n > 0))
}

fn jsonl_values(text: &str) -> (Vec<Value>, usize) {
    let mut values = Vec::new();
    let mut corrupt = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => values.push(v),
            Err(_) => corrupt += 1,
        }
    }
    (values, corrupt)
}

fn blocks<'a>(v: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn count_blocks(values: &[Value], pointer: &str, block_type: &str) -> usize {
    values
        .iter()
        .flat_map(|v| blocks(v, pointer))
        .filter(|b| b["type"] == block_type)
        .count()
}

fn expected(path: &Path) -> Expected {
    let text = std::fs::read_to_string(path).unwrap();
    let folder = path
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap();
    match folder {
        "claude-code" => {
            let (records, corrupt) = if text.trim_start().starts_with('[') {
                (serde_json::from_str::<Vec<Value>>(&text).unwrap(), 0)
            } else {
                jsonl_values(&text)
            };
            let main: Vec<Value> = records
                .into_iter()
                .filter(|r| r["isSidechain"] != true)
                .collect();
            Expected {
                format: "claude-code",
                tool_calls: count_blocks(&main, "/message/content", "tool_use"),
                tool_results: count_blocks(&main, "/message/content", "tool_result"),
                foreign_compactions: main
                    .iter()
                    .filter(|r| r["subtype"] == "compact_boundary")
                    .count(),
                corrupt_lines: corrupt,
                usage_records: Some(claude_responses_with_usage(&main)),
            }
        }
        "codex" => {
            let (records, corrupt) = jsonl_values(&text);
            let items = |kinds: &[&str]| {
                records
                    .iter()
                    .filter(|r| {
                        r["type"] == "response_item"
                            && kinds.iter().any(|k| r["payload"]["type"] == *k)
                    })
                    .count()
            };
            Expected {
                format: "codex",
                tool_calls: items(&["function_call", "custom_tool_call", "local_shell_call"]),
                tool_results: items(&[
                    "function_call_output",
                    "custom_tool_call_output",
                    "local_shell_call_output",
                ]),
                foreign_compactions: records.iter().filter(|r| r["type"] == "compacted").count(),
                corrupt_lines: corrupt,
                usage_records: None,
            }
        }
        "pi" => {
            let (records, corrupt) = jsonl_values(&text);
            let assistant: Vec<Value> = records
                .iter()
                .filter(|r| r["message"]["role"] == "assistant")
                .cloned()
                .collect();
            Expected {
                format: "pi",
                tool_calls: count_blocks(&assistant, "/message/content", "toolCall"),
                tool_results: records
                    .iter()
                    .filter(|r| r["message"]["role"] == "toolResult")
                    .count(),
                foreign_compactions: records.iter().filter(|r| r["type"] == "compaction").count(),
                corrupt_lines: corrupt,
                usage_records: Some(
                    assistant
                        .iter()
                        .filter(|r| {
                            nonzero_usage(
                                &r["message"]["usage"],
                                &["input", "output", "cacheRead", "cacheWrite"],
                            )
                        })
                        .count(),
                ),
            }
        }
        "openai-chat" => {
            let doc: Value = serde_json::from_str(&text).unwrap();
            let messages = doc["messages"].as_array().unwrap();
            Expected {
                format: "openai-chat",
                tool_calls: messages
                    .iter()
                    .map(|m| m["tool_calls"].as_array().map_or(0, Vec::len))
                    .sum(),
                tool_results: messages.iter().filter(|m| m["role"] == "tool").count(),
                foreign_compactions: 0,
                corrupt_lines: 0,
                usage_records: Some(
                    messages
                        .iter()
                        .filter(|m| {
                            let usage = &m["extra"]["response"]["usage"];
                            nonzero_usage(usage, &["prompt_tokens", "completion_tokens"])
                        })
                        .count(),
                ),
            }
        }
        other => panic!("no expectations for transcripts in {other}/"),
    }
}

fn transcripts(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl" || e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_real_transcript_imports_and_its_log_works() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let out_dir = tempfile::tempdir().unwrap();
    let mut formats = std::collections::BTreeSet::new();
    let files = transcripts(&dir);
    assert!(
        files.len() >= 9,
        "expected the nine fixture transcripts, found {}",
        files.len()
    );
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let log = out_dir.path().join(format!("{name}.soba.jsonl"));
        let report = stdout_json(
            &soba(&[
                "import",
                file.to_str().unwrap(),
                "-o",
                log.to_str().unwrap(),
                "--json",
            ]),
            &name,
        );
        let want = expected(&file);
        let got = Expected {
            format: match report["format"].as_str().unwrap() {
                "claude-code" => "claude-code",
                "codex" => "codex",
                "pi" => "pi",
                "openai-chat" => "openai-chat",
                other => panic!("{name}: unexpected format {other}"),
            },
            tool_calls: report["toolCalls"].as_u64().unwrap() as usize,
            tool_results: report["toolResults"].as_u64().unwrap() as usize,
            foreign_compactions: report["foreignCompactions"].as_u64().unwrap() as usize,
            corrupt_lines: report["corruptLines"].as_array().unwrap().len(),
            usage_records: want
                .usage_records
                .map(|_| report["usageRecords"].as_u64().unwrap() as usize),
        };
        assert_eq!(got, want, "{name}: {report}");
        formats.insert(want.format);
        let calls = report["toolCalls"].as_u64().unwrap();
        let results = report["toolResults"].as_u64().unwrap();
        let unmatched = report["unmatchedCalls"].as_u64().unwrap();
        let orphans = report["orphanResults"].as_u64().unwrap();
        assert_eq!(
            calls - unmatched,
            results - orphans,
            "{name}: every matched call has one result"
        );
        assert!(
            report["usageRecords"].as_u64().unwrap() > 0,
            "{name}: no usage imported"
        );
        assert!(report["model"].is_string(), "{name}: no model");

        // The log loads cleanly, entry for entry.
        let (session, load) = soba_core::session::log::read_session(&log).unwrap();
        assert!(
            load.skipped.is_empty() && load.torn_tail.is_none(),
            "{name}: {load:?}"
        );
        assert_eq!(
            session.len() as u64,
            report["entries"].as_u64().unwrap(),
            "{name}"
        );
        assert!(
            session
                .entries()
                .iter()
                .all(|e| e.source_id.is_some() || e.body.type_name() == "rewind"),
            "{name}: entry without sourceId"
        );

        let budget = stdout_json(
            &soba(&["budget", log.to_str().unwrap(), "--json"]),
            &format!("budget {name}"),
        );
        assert!(
            budget["effectiveTokens"].as_u64().unwrap() > 0,
            "{name}: {budget}"
        );
        assert_eq!(
            budget["model"], report["model"],
            "{name}: the transcript's model is the session's"
        );
        // The budget says it is estimated, and how: Claude counts are raised by the catalog's
        // factor, OpenAI models' counts are exact, and either is raised where the session's own
        // usage reports show the provider counting more: the factor the log itself teaches.
        let claude = report["model"]
            .as_str()
            .is_some_and(|m| m.contains("claude"));
        let configured = if claude { 1.15 } else { 1.0 };
        let calibration = &budget["calibration"];
        assert_eq!(calibration["tokenizer"], "o200k_base", "{name}: {budget}");
        let factor = calibration["factor"].as_f64().unwrap();
        let learned = calibration["source"] == "session";
        if learned {
            assert!(
                factor > configured && factor <= soba_core::tokens::MAX_LEARNED_FACTOR,
                "{name}: {budget}"
            );
        } else {
            assert_eq!(
                calibration["source"],
                if claude { "catalog" } else { "exact" },
                "{name}: {budget}"
            );
            assert_eq!(factor, configured, "{name}");
        }
        let (mut reopened, _) = soba_core::session::log::read_session(&log).unwrap();
        let model = soba_core::config::Config::resolve(
            &[],
            reopened.header.model_config().as_ref(),
            &Default::default(),
        )
        .unwrap()
        .model;
        reopened.configure_counting(&model);
        assert_eq!(
            *calibration,
            serde_json::to_value(reopened.calibration()).unwrap(),
            "{name}: the CLI learns what the log teaches"
        );
        let text = soba(&["budget", log.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            (text.contains("estimated") || text.contains("provider_usage: "))
                && text.contains("counted with o200k_base"),
            "{name}: {text}"
        );
        assert_eq!(
            text.contains("× 1.15 (catalog factor"),
            claude && !learned,
            "{name}: {text}"
        );
        assert_eq!(
            text.contains(&format!(
                "× {factor:.2} (learned from this session's usage reports"
            )),
            learned,
            "{name}: {text}"
        );
        let context = stdout_json(
            &soba(&["context", log.to_str().unwrap(), "--json"]),
            &format!("context {name}"),
        );
        let messages = context["messages"].as_array().unwrap();
        assert!(!messages.is_empty(), "{name}: empty model input");
        assert!(
            messages
                .iter()
                .all(|m| m["entryId"].as_str().is_none_or(|id| session
                    .get(id)
                    .is_some_and(|e| e.body.type_name() != "foreign_compaction"))),
            "{name}: a foreign compaction reached the model input"
        );
    }
    assert_eq!(formats.len(), 4, "every format is covered: {formats:?}");
}

const SMALL_CLAUDE: &str = concat!(
    r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"hi"}}"#,
    "\n",
    r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"s","message":{"id":"m","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":3,"output_tokens":2}}}"#,
    "\n"
);

#[test]
fn an_existing_output_is_kept_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    let log = dir.path().join("s.jsonl");
    std::fs::write(&log, "precious").unwrap();
    let (i, o) = (input.to_str().unwrap(), log.to_str().unwrap());
    let refused = soba(&["import", i, "-o", o]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--force"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "precious");
    let forced = stdout_json(
        &soba(&["import", i, "-o", o, "--force", "--json"]),
        "forced import",
    );
    assert_eq!(
        forced["messages"],
        json!({"user": 1, "assistant": 1, "system": 0})
    );
    assert_eq!(forced["model"], "claude-sonnet-4-5");
}

#[test]
fn text_output_summarizes_and_flags_override_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
        "--context-window",
        "150000",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(claude-code)") && text.contains("1 user, 1 assistant"),
        "{text}"
    );
    let budget = stdout_json(
        &soba(&["budget", log.to_str().unwrap(), "--json"]),
        "budget",
    );
    assert_eq!(budget["contextWindow"], 150000);
}

#[test]
fn a_file_that_is_not_a_transcript_is_refused_naming_the_formats() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("notes.txt");
    std::fs::write(&input, "just some notes\n").unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("claude-code, codex, pi, openai-chat, swe-agent, aider, copilot-cli"),
        "{err}"
    );
    assert!(!log.exists(), "nothing is written for a refused import");
}

/// Small transcripts in the three formats imported by detection, written for this test.
#[test]
fn swe_agent_aider_and_copilot_cli_files_are_imported_and_detected() {
    let swe = serde_json::json!({
        "trajectory": [], "info": {"exit_status": "submitted"}, "environment": "main",
        "replay_config": "{\"agent\": {\"model\": {\"name\": \"gpt-4o\"}}}",
        "history": [
            {"role": "system", "content": "You are a helpful assistant.", "message_type": "system_prompt"},
            {"role": "user", "content": "fix the failing test", "message_type": "observation"},
            {"role": "assistant", "content": "Running it.", "message_type": "action",
             "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"pytest\"}"}}]},
            {"role": "tool", "content": "1 failed", "message_type": "observation", "tool_call_ids": ["t1"]}
        ]
    })
    .to_string();
    let aider = "# aider chat started at 2026-05-01 10:00:00\n\n> Main model: gpt-4o with diff edit format  \n\n#### fix the failing test  \n\nThe assertion is wrong.\n\n> Applied edit to tests/test_a.py  \n";
    let copilot = [
        r#"{"type":"session.start","id":"a","timestamp":"2026-09-17T10:00:00.000Z","parentId":null,"data":{"sessionId":"c2a8","context":{"cwd":"/home/me/infra"}}}"#,
        r#"{"type":"user.message","id":"b","timestamp":"2026-09-17T10:00:01.000Z","parentId":"a","data":{"content":"fix the failing test"}}"#,
        r#"{"type":"assistant.message","id":"c","timestamp":"2026-09-17T10:00:02.000Z","parentId":"b","data":{"messageId":"m","content":"ok","toolRequests":[{"toolCallId":"t1","name":"bash","arguments":{"command":"pytest"}}]}}"#,
        r#"{"type":"tool.execution_complete","id":"d","timestamp":"2026-09-17T10:00:03.000Z","parentId":"c","data":{"toolCallId":"t1","success":true,"result":{"content":"1 passed"}}}"#,
    ]
    .join("\n");
    for (name, file, text, format) in [
        ("swe", "task.traj", swe.as_str(), "swe-agent"),
        ("aider", ".aider.chat.history.md", aider, "aider"),
        ("copilot", "events.jsonl", copilot.as_str(), "copilot-cli"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join(file);
        std::fs::write(&input, text).unwrap();
        let log = dir.path().join("s.jsonl");
        let out = soba(&[
            "import",
            input.to_str().unwrap(),
            "-o",
            log.to_str().unwrap(),
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["format"], format, "{name}: {report}");
        assert_eq!(report["messages"]["user"], 1, "{name}: {report}");
        let (session, _) = soba_core::session::log::read_session(&log).unwrap();
        let prompt = session
            .entries()
            .iter()
            .find_map(|e| {
                e.as_message()
                    .filter(|m| m.role == soba_core::session::entry::Role::User)
            })
            .unwrap();
        assert_eq!(
            soba_core::session::entry::blocks_text(&prompt.content),
            "fix the failing test",
            "{name}"
        );
    }
}

#[test]
fn a_forced_format_that_does_not_fit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
        "--format",
        "codex",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("codex transcript holds no conversation"),
        "{out:?}"
    );
}

#[test]
fn the_output_cannot_be_the_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    let i = input.to_str().unwrap();
    let out = soba(&["import", i, "-o", i, "--force"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is the transcript itself"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&input).unwrap(), SMALL_CLAUDE);
}

#[test]
fn a_log_being_written_is_not_replaced_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    let log = dir.path().join("live.jsonl");
    let i = input.to_str().unwrap();
    stdout_json(
        &soba(&["import", i, "-o", log.to_str().unwrap(), "--json"]),
        "first import",
    );
    let before = std::fs::read(&log).unwrap();
    let (writer, _) =
        soba_core::session::log::SessionLog::open(&log, soba_core::config::Durability::Flush)
            .unwrap();
    let out = soba(&["import", i, "-o", log.to_str().unwrap(), "--force"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("one writer per session"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), before);
    drop(writer);
}

#[test]
fn an_unwritable_output_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, SMALL_CLAUDE).unwrap();
    // A path below a regular file cannot be created.
    let log = input.join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(input.to_str().unwrap()),
        "{out:?}"
    );
}

/// SMALL_CLAUDE with one byte that is not UTF-8 (0xFF) in the assistant's text, line 2.
fn claude_with_a_bad_byte() -> Vec<u8> {
    let mut bytes = SMALL_CLAUDE.as_bytes().to_vec();
    let at = bytes
        .windows(5)
        .position(|w| w == b"hello")
        .expect("the assistant text");
    bytes.insert(at + 2, 0xFF);
    bytes
}

#[test]
fn a_transcript_with_an_invalid_utf8_byte_is_imported_with_a_warning_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    std::fs::write(&input, claude_with_a_bad_byte()).unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
        "--json",
    ]);
    let report = stdout_json(&out, "import");
    assert_eq!(report["messages"]["assistant"], 1, "{report}");
    assert_eq!(report["corruptLines"][0]["line"], 2, "{report}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: not valid UTF-8", input.display()))
            && err.contains("line kept"),
        "{err}"
    );
    // The line is kept, its bad byte replaced.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("he\u{FFFD}llo"), "{text}");

    // Following the same file (as `soba attach` does) gives the same session and report.
    let options = soba::import::ImportOptions {
        source_path: "t.jsonl".into(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    };
    let bytes = claude_with_a_bad_byte();
    let mut s = soba::import::stream::StreamImporter::new(None, options.clone()).unwrap();
    s.feed(&bytes).unwrap();
    let streamed = s.finish().unwrap();
    let (lossy, bad) = soba::import::decode_lossy(&bytes);
    let mut whole = soba::import::transcript::import_str(&lossy, None, &options).unwrap();
    whole.note_lossy_lines(bad);
    assert_eq!(streamed, whole);
}

/// SMALL_CLAUDE with a line of bytes that are neither UTF-8 nor JSON after it.
fn claude_with_a_line_of_bad_bytes() -> (Vec<u8>, usize) {
    let mut bytes = SMALL_CLAUDE.trim_end().as_bytes().to_vec();
    let bad_line = bytes.iter().filter(|b| **b == b'\n').count() + 2;
    bytes.extend_from_slice(b"\n\xff\xfe garbage \xc3\n");
    (bytes, bad_line)
}

#[test]
fn a_line_of_bad_bytes_gets_one_warning_that_says_it_was_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.jsonl");
    let (bytes, bad_line) = claude_with_a_line_of_bad_bytes();
    std::fs::write(&input, &bytes).unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
        "--json",
    ]);
    let report = stdout_json(&out, "import");
    let corrupt = report["corruptLines"].as_array().unwrap();
    assert_eq!(corrupt.len(), 1, "{report}");
    assert_eq!(corrupt[0]["line"], bad_line, "{report}");
    let reason = corrupt[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("not valid UTF-8")
            && reason.contains("not valid JSON")
            && reason.ends_with("line skipped")
            && !reason.contains("kept"),
        "{reason}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&format!("t.jsonl:{bad_line}:")))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].ends_with("line skipped"), "{err}");

    // Following the file gives the same single report.
    let options = soba::import::ImportOptions {
        source_path: "t.jsonl".into(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    };
    let mut s = soba::import::stream::StreamImporter::new(None, options.clone()).unwrap();
    s.feed(&bytes).unwrap();
    let streamed = s.finish().unwrap();
    let (lossy, bad) = soba::import::decode_lossy(&bytes);
    let mut whole = soba::import::transcript::import_str(&lossy, None, &options).unwrap();
    whole.note_lossy_lines(bad);
    assert_eq!(streamed, whole);
    assert_eq!(streamed.report.corrupt_lines.len(), 1);
}

/// A Codex rollout whose responses hold only items the reader keeps whole: a search of the
/// tool catalog (its output carries the tool schemas) and a web search.
fn codex_rollout_with_search_items() -> String {
    let schemas: Vec<Value> = (0..40)
        .map(|i| {
            json!({"type": "function", "name": format!("mcp__docs__tool_{i}"),
            "description": "Looks up one page of the project's documentation by its title.",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}})
        })
        .collect();
    let records = [
        json!({"type": "session_meta", "payload": {"id": "0199-codex", "cwd": "/work/app"}}),
        json!({"type": "turn_context", "payload": {"model": "gpt-5-codex"}}),
        json!({"type": "response_item", "payload": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "find the docs tool and look up tokio"}]}}),
        json!({"type": "response_item", "payload": {"type": "tool_search_call", "call_id": "ts1",
            "execution": "client", "arguments": {"query": "docs"}}}),
        json!({"type": "event_msg", "payload": {"type": "token_count", "info": {
            "last_token_usage": {"input_tokens": 9000, "cached_input_tokens": 0, "output_tokens": 20},
            "model_context_window": 272000}}}),
        json!({"type": "response_item", "payload": {"type": "tool_search_output", "call_id": "ts1",
            "status": "completed", "execution": "client", "tools": schemas}}),
        json!({"type": "response_item", "payload": {"type": "web_search_call", "id": "ws_1",
            "status": "completed", "action": {"type": "search", "query": "tokio select"}}}),
        json!({"type": "event_msg", "payload": {"type": "token_count", "info": {
            "last_token_usage": {"input_tokens": 14000, "cached_input_tokens": 9000, "output_tokens": 30},
            "model_context_window": 272000}}}),
    ];
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["timestamp"] = json!("2026-11-30T10:00:00Z");
            format!("{r}\n")
        })
        .collect()
}

#[test]
fn codex_search_items_are_kept_counted_and_listed_and_their_usage_anchors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rollout.jsonl");
    std::fs::write(&input, codex_rollout_with_search_items()).unwrap();
    let log = dir.path().join("s.jsonl");
    let out = soba(&[
        "import",
        input.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kept whole (opaque, counted): response_item:tool_search_output 1, response_item:web_search_call 1"),
        "{text}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("unknown type"),
        "nothing is left out: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let json_log = dir.path().join("j.jsonl");
    let report = stdout_json(
        &soba(&[
            "import",
            input.to_str().unwrap(),
            "-o",
            json_log.to_str().unwrap(),
            "--json",
        ]),
        "import --json",
    );
    assert_eq!(report["opaqueRecords"]["response_item:web_search_call"], 1);
    assert_eq!(report["unknownRecords"], json!({}));
    assert_eq!(report["usageRecords"], 2);

    // The budget anchors on the last report (14,000 input, 9,000 of them cached, + 30 output),
    // not on the first: nothing comes after it but the allowance for the growth the first
    // report's successor showed beyond its counted tail (capped at 5% of the usage).
    let budget = stdout_json(
        &soba(&["budget", log.to_str().unwrap(), "--json"]),
        "budget",
    );
    let unseen = &budget["breakdown"]["unseen"];
    assert_eq!(unseen["kind"], "growth", "{budget}");
    let growth = unseen["tokens"].as_u64().unwrap();
    assert!(growth <= 14_030 / 20, "{budget}");
    assert_eq!(budget["effectiveTokens"], 14_030 + growth, "{budget}");
}
