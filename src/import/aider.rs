//! aider chat history (`.aider.chat.history.md` in the repository aider ran in).
//!
//! aider appends Markdown as the chat goes (its `InputOutput`): `# aider chat started at …`
//! opens each run; a user input is one or more `#### ` lines; the model's reply is plain text;
//! aider's own output (edits applied, commits, command output, warnings, the model in use) is
//! `> ` lines, each ending in two spaces (a Markdown line break), which tells it apart from a
//! quote inside a reply.
//!
//! A user input that is an in-chat command (`/run pytest`, `!ls`, `/test`, `/add a.py`) is
//! work aider did, not a prompt: it becomes a tool call (`bash` for `/run`, `/test` and `!`,
//! with the command; `aider` for the others) whose result is the `> ` output after it. In
//! other `> ` output, `Applied edit to PATH` and `Added PATH to the chat` become `file`
//! entries (modified, read), and `Model: …` / `Main model: …` names the model; the rest is
//! aider talking to the user, never model input, and is counted as skipped.

use super::{message, EntryBuilder, Format, HeaderInfo, ImportError, ImportOptions, ImportResult};
use soba_core::session::entry::{
    ContentBlock, EntryBody, FileEntry, FileOp, FileSource, Role, ToolResultEntry,
};

const RUN_STARTED: &str = "# aider chat started at ";
const USER: &str = "#### ";

/// Whether a text looks like an aider chat history.
pub(crate) fn looks_like_history(text: &str) -> bool {
    text.lines()
        .take(200)
        .any(|l| l.starts_with(RUN_STARTED) || l.starts_with(USER))
}

/// One block of the history, in file order.
#[derive(Debug, PartialEq)]
enum Block {
    User(String),
    Tool(Vec<String>),
    Reply(String),
}

/// aider's own output: `> text  ` (or a bare `>  `).
fn tool_line(line: &str) -> Option<&str> {
    let body = line.strip_suffix("  ")?;
    body.strip_prefix("> ").or((body == ">").then_some(""))
}

fn blocks(text: &str) -> (Vec<(usize, Block)>, usize) {
    let mut out: Vec<(usize, Block)> = Vec::new();
    let mut runs = 0;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.starts_with(RUN_STARTED) {
            runs += 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix(USER).or((line == "####").then_some("")) {
            let rest = rest.trim_end();
            match out.last_mut() {
                Some((_, Block::User(u))) => {
                    u.push('\n');
                    u.push_str(rest);
                }
                _ => out.push((line_no, Block::User(rest.to_string()))),
            }
            continue;
        }
        if let Some(rest) = tool_line(line) {
            match out.last_mut() {
                Some((_, Block::Tool(t))) => t.push(rest.to_string()),
                _ => out.push((line_no, Block::Tool(vec![rest.to_string()]))),
            }
            continue;
        }
        match out.last_mut() {
            Some((_, Block::Reply(r))) => {
                r.push('\n');
                r.push_str(line);
            }
            _ if line.trim().is_empty() => {}
            _ => out.push((line_no, Block::Reply(line.to_string()))),
        }
    }
    (out, runs)
}

/// A user input that is an in-chat command: the tool name and its input.
fn command(input: &str) -> Option<(&'static str, serde_json::Value)> {
    let first = input.lines().next().unwrap_or("").trim();
    if let Some(shell) = first.strip_prefix('!') {
        return Some(("bash", serde_json::json!({ "command": shell.trim() })));
    }
    let rest = first.strip_prefix('/')?;
    let (name, args) = rest.split_once(' ').unwrap_or((rest, ""));
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return None;
    }
    Some(match name {
        "run" | "test" => ("bash", serde_json::json!({ "command": args.trim() })),
        _ => ("aider", serde_json::json!({ "command": first })),
    })
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    if !looks_like_history(text) {
        return Err(ImportError::WrongFormat {
            format: Format::Aider,
            reason: "no `# aider chat started at` line and no `#### ` user input".into(),
        });
    }
    let mut builder = EntryBuilder::new(Format::Aider, &options.now);
    let mut header = HeaderInfo::new(Format::Aider, options);
    let (blocks, _runs) = blocks(text);
    let mut open_call: Option<String> = None;
    for (line, block) in blocks {
        let source_id = format!("line {line}");
        let parent = builder.last_id();
        match block {
            Block::User(input) => match command(&input) {
                Some((name, input)) => {
                    let id = format!("aider-{line}");
                    let mut m = message(
                        Role::Assistant,
                        vec![ContentBlock::ToolCall {
                            id: id.clone(),
                            name: name.into(),
                            input: Box::new(input),
                            extra: Default::default(),
                        }],
                    );
                    // The user ran it through aider; the model did not ask for it.
                    m.synthetic = true;
                    builder.push(parent, Some(&source_id), None, EntryBody::Message(m));
                    open_call = Some(id);
                }
                None => {
                    open_call = None;
                    builder.push(
                        parent,
                        Some(&source_id),
                        None,
                        EntryBody::Message(message(Role::User, vec![ContentBlock::text(input)])),
                    );
                }
            },
            Block::Reply(reply) => {
                open_call = None;
                builder.push(
                    parent,
                    Some(&source_id),
                    None,
                    EntryBody::Message(message(
                        Role::Assistant,
                        vec![ContentBlock::text(reply.trim_end())],
                    )),
                );
            }
            Block::Tool(lines) => {
                if let Some(call_id) = open_call.take() {
                    let name = builder
                        .entries()
                        .last()
                        .and_then(|e| e.tool_calls().next().map(|(_, n, _)| n.to_string()));
                    builder.push(
                        parent,
                        Some(&source_id),
                        None,
                        EntryBody::ToolResult(ToolResultEntry {
                            call_id,
                            tool_name: name,
                            content: vec![ContentBlock::text(lines.join("\n"))],
                            is_error: false,
                            exit_code: None,
                        }),
                    );
                    continue;
                }
                for l in &lines {
                    aider_output(l, &source_id, &mut builder, &mut header);
                }
            }
        }
    }
    Ok(builder.finish(header))
}

/// One line of aider's own output outside a command: file facts and the model, else skipped.
fn aider_output(line: &str, source_id: &str, builder: &mut EntryBuilder, header: &mut HeaderInfo) {
    let file = |path: &str, op: FileOp| {
        EntryBody::File(FileEntry {
            path: path.trim().to_string(),
            op,
            source: FileSource::Agent,
        })
    };
    let body = if let Some(path) = line.strip_prefix("Applied edit to ") {
        file(path, FileOp::Modified)
    } else if let Some(path) = line
        .strip_prefix("Added ")
        .and_then(|p| p.strip_suffix(" to the chat"))
        .filter(|p| !p.contains(' '))
    {
        file(path, FileOp::Read)
    } else {
        let model = line
            .strip_prefix("Main model: ")
            .or_else(|| line.strip_prefix("Model: "))
            .and_then(|m| m.split(" with ").next());
        if let Some(model) = model {
            header.set_model(model.trim());
        }
        builder.skipped("aider output");
        return;
    };
    let parent = builder.last_id();
    builder.push(parent, Some(source_id), None, body);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::options;
    use soba_core::session::entry::blocks_text;

    pub(in crate::import) const HISTORY: &str = "\n# aider chat started at 2026-05-01 10:00:00\n\n\
> Aider v0.86.1  \n\
> Main model: gpt-4o with diff edit format  \n\
> Git repo: .git with 12 files  \n\
> Added src/parse.py to the chat  \n\
\n\
#### the parser drops exponents  \n\
#### like 1e5  \n\
\n\
The exponent branch returns early.\n\
\n\
> Some quote from the reply, not aider output\n\
\n\
src/parse.py\n\
```python\n\
<<<<<<< SEARCH\n\
=======\n\
>>>>>>> REPLACE\n\
```\n\
\n\
> Applied edit to src/parse.py  \n\
> Commit 1a2b3c4 fix: parse exponents  \n\
\n\
#### /run pytest -q  \n\
\n\
> 1 passed in 0.01s  \n\
> Add command output to the chat? (Y)es/(N)o [Yes]: y  \n\
\n\
#### thanks  \n";

    #[test]
    fn an_aider_history_becomes_prompts_replies_commands_and_file_facts() {
        let r = import_str(HISTORY, &options()).unwrap();
        assert_eq!(r.report.model.as_deref(), Some("gpt-4o"));
        assert_eq!(r.report.messages.user, 2);
        let first = r
            .entries
            .iter()
            .find_map(|e| e.as_message().filter(|m| m.role == Role::User))
            .unwrap();
        assert_eq!(
            blocks_text(&first.content),
            "the parser drops exponents\nlike 1e5"
        );
        // The reply keeps its own quote line and its edit block.
        let reply = r
            .entries
            .iter()
            .find_map(|e| {
                e.as_message()
                    .filter(|m| m.role == Role::Assistant && !m.synthetic)
            })
            .unwrap();
        let reply = blocks_text(&reply.content);
        assert!(
            reply.contains("> Some quote") && reply.contains(">>>>>>> REPLACE"),
            "{reply}"
        );
        let files: Vec<(&str, FileOp)> = r
            .entries
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::File(f) => Some((f.path.as_str(), f.op)),
                _ => None,
            })
            .collect();
        assert_eq!(
            files,
            vec![
                ("src/parse.py", FileOp::Read),
                ("src/parse.py", FileOp::Modified)
            ]
        );
        // `/run pytest -q` is a shell call, its output the result.
        let call = r
            .entries
            .iter()
            .flat_map(|e| e.tool_calls())
            .next()
            .unwrap();
        assert_eq!(
            (call.1, call.2["command"].as_str()),
            ("bash", Some("pytest -q"))
        );
        assert_eq!(r.report.tool_results, 1);
        assert_eq!(r.report.unmatched_calls, 0);
        assert!(r.report.skipped_records["aider output"] >= 3);
        assert!(is_one_line(&r));
        loads(&r);
    }
}
