//! The scripted coding session `soba demo` runs: a multi-turn bug fix in a small JSON library,
//! written as data. File contents and tool output are generated deterministically so the
//! session has the weight of a real one (reads of whole files, long test logs) without
//! shipping fixtures.

use serde_json::{json, Value};

use soba_core::session::entry::{CheckpointKind, FileOp};

/// One thing that happens in the session, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The agent's system prompt and tool schemas.
    Setup {
        system_prompt: String,
        tool_schemas: String,
    },
    /// A user prompt (starts a turn), optionally with a pasted screenshot.
    User {
        text: String,
        screenshot: bool,
    },
    /// One inference that calls a tool, and the tool's result.
    Tool {
        thought: String,
        name: &'static str,
        input: Value,
        output: String,
        exit_code: Option<i64>,
    },
    /// One inference that answers in text.
    Answer(String),
    /// The agent finished its turn.
    TurnComplete,
    Checkpoint {
        kind: CheckpointKind,
        label: String,
    },
    /// `/compact <instructions>`; `edited_during` is a file the user saves in the editor while
    /// the capsule is being written (the watcher appends it, so the plan's leaf changes).
    Compact {
        instructions: String,
        edited_during: Option<(String, FileOp)>,
    },
    /// The provider rejects the next request as longer than its window (it counts the
    /// screenshot higher than the local estimate): recovery compaction, then the one retry.
    ProviderOverflow,
}

const CRATE: &str = "/work/tinyjson";

fn user(text: &str) -> Action {
    Action::User {
        text: text.into(),
        screenshot: false,
    }
}

fn tool(thought: &str, name: &'static str, input: Value, output: String) -> Action {
    Action::Tool {
        thought: thought.into(),
        name,
        input,
        output,
        exit_code: None,
    }
}

fn bash(thought: &str, command: &str, output: String, exit_code: i64) -> Action {
    Action::Tool {
        thought: thought.into(),
        name: "Bash",
        input: json!({ "command": command }),
        output,
        exit_code: Some(exit_code),
    }
}

fn read(thought: &str, path: &str, body: String) -> Action {
    tool(
        thought,
        "Read",
        json!({ "file_path": format!("{CRATE}/{path}") }),
        numbered(&body),
    )
}

fn edit(thought: &str, path: &str, old: &str, new: &str) -> Action {
    tool(
        thought,
        "Edit",
        json!({ "file_path": format!("{CRATE}/{path}"), "old_string": old, "new_string": new }),
        format!("The file {CRATE}/{path} has been updated."),
    )
}

/// `cat -n` style, as a Read tool returns a file.
fn numbered(body: &str) -> String {
    body.lines()
        .enumerate()
        .map(|(i, l)| format!("{:>6}\t{l}\n", i + 1))
        .collect()
}

const NOUNS: [&str; 16] = [
    "digit",
    "sign",
    "exponent",
    "fraction",
    "mantissa",
    "escape",
    "surrogate",
    "whitespace",
    "literal",
    "keyword",
    "bracket",
    "separator",
    "quote",
    "codepoint",
    "token",
    "span",
];
const VERBS: [&str; 8] = [
    "scan", "peek", "consume", "expect", "skip", "classify", "validate", "measure",
];

/// A Rust module of `functions` lexer-style helpers, deterministic in `seed`.
fn rust_module(title: &str, seed: usize, functions: usize) -> String {
    let mut out = format!(
        "//! {title}\n\nuse crate::error::{{LexError, Position}};\nuse crate::token::{{Token, TokenKind}};\n\n"
    );
    for k in 0..functions {
        let noun = NOUNS[(seed + k * 7) % NOUNS.len()];
        let verb = VERBS[(seed + k * 3) % VERBS.len()];
        let n = seed * 31 + k;
        out.push_str(&format!(
            "/// {verb_cap}s the {noun} starting at `pos` and returns the position after it.\n\
             ///\n/// Fails with [`LexError::Unexpected{noun_cap}`] when the input ends early.\n\
             pub(crate) fn {verb}_{noun}_{n}(input: &[u8], pos: usize) -> Result<(usize, Token), LexError> {{\n\
             \x20   let mut end = pos;\n\
             \x20   while end < input.len() && is_{noun}_byte(input[end]) {{\n\
             \x20       end += 1;\n\
             \x20   }}\n\
             \x20   if end == pos {{\n\
             \x20       return Err(LexError::Unexpected{noun_cap} {{ at: Position::from_offset(input, pos) }});\n\
             \x20   }}\n\
             \x20   let kind = TokenKind::{noun_cap};\n\
             \x20   Ok((end, Token {{ kind, start: pos, len: end - pos }}))\n\
             }}\n\n",
            verb_cap = capitalize(verb),
            noun_cap = capitalize(noun),
        ));
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `cargo test` output: `passing` tests pass, `failing` ones panic with a message.
fn cargo_test(passing: usize, failing: &[(&str, &str)]) -> String {
    let total = passing + failing.len();
    let mut out = String::from(
        "   Compiling tinyjson v0.3.1 (/work/tinyjson)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 2.41s\n     Running unittests src/lib.rs (target/debug/deps/tinyjson-5c1f0a9e7d2b8f43)\n\n",
    );
    out.push_str(&format!("running {total} tests\n"));
    for k in 0..passing {
        let noun = NOUNS[k % NOUNS.len()];
        out.push_str(&format!("test lexer::tests::{noun}_case_{k} ... ok\n"));
    }
    for (name, _) in failing {
        out.push_str(&format!("test {name} ... FAILED\n"));
    }
    if !failing.is_empty() {
        out.push_str("\nfailures:\n\n");
        for (name, msg) in failing {
            out.push_str(&format!(
                "---- {name} stdout ----\n\nthread '{name}' panicked at tests/numbers.rs:41:5:\n{msg}\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\n"
            ));
        }
        out.push_str("\nfailures:\n");
        for (name, _) in failing {
            out.push_str(&format!("    {name}\n"));
        }
        out.push_str(&format!(
            "\ntest result: FAILED. {passing} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.04s\n\nerror: test failed, to rerun pass `--lib`\n",
            failing.len()
        ));
    } else {
        out.push_str(&format!(
            "\ntest result: ok. {passing} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.03s\n"
        ));
    }
    out
}

/// A JSON test corpus file of `records` number-heavy records.
fn json_corpus(records: usize) -> String {
    let mut out = String::from("[\n");
    for k in 0..records {
        out.push_str(&format!(
            "  {{\"id\": {k}, \"value\": {}.{}e{}, \"label\": \"sample-{}\", \"tags\": [\"{}\", \"{}\"]}},\n",
            k * 37 % 1000,
            k * 13 % 97,
            (k % 9) as i64 - 4,
            k * 7919 % 10007,
            NOUNS[k % NOUNS.len()],
            VERBS[k % VERBS.len()],
        ));
    }
    out.push_str("  {\"id\": -1, \"value\": 0}\n]\n");
    out
}

fn bench(parse_ns: u64, baseline_ns: u64) -> String {
    let mut out = String::from("    Finished `bench` profile [optimized] target(s) in 31.02s\n     Running benches/parse.rs\n");
    for (k, name) in [
        "canada.json",
        "citm_catalog.json",
        "twitter.json",
        "numbers.json",
    ]
    .iter()
    .enumerate()
    {
        let t = parse_ns * (k as u64 + 2);
        let b = baseline_ns * (k as u64 + 2);
        out.push_str(&format!(
            "parse/{name}\n                        time:   [{}.{:02} µs {}.{:02} µs {}.{:02} µs]\n                        thrpt:  [{} MiB/s]\n                 change: [{:+.1}% {:+.1}% {:+.1}%] (p = 0.00 < 0.05)\n                        Performance has regressed.\n",
            t / 1000, t % 97, t / 1000, (t + 13) % 97, t / 1000 + 1, (t + 29) % 97,
            1_000_000 / t.max(1),
            (t as f64 / b as f64 - 1.0) * 100.0 - 1.3,
            (t as f64 / b as f64 - 1.0) * 100.0,
            (t as f64 / b as f64 - 1.0) * 100.0 + 1.1,
        ));
    }
    out
}

fn clippy(warnings: usize) -> String {
    let mut out = String::from("    Checking tinyjson v0.3.1 (/work/tinyjson)\n");
    for k in 0..warnings {
        let noun = NOUNS[(k * 5) % NOUNS.len()];
        out.push_str(&format!(
            "warning: this `if` has identical blocks\n  --> src/lexer.rs:{}:9\n   |\n{} |         if is_{noun}_byte(b) {{ end += 1 }} else {{ end += 1 }}\n   |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n   = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#if_same_then_else\n\n",
            100 + k * 17,
            100 + k * 17
        ));
    }
    out.push_str(&format!(
        "warning: `tinyjson` (lib) generated {warnings} warnings\n    Finished `dev` profile [unoptimized + debuginfo] target(s) in 1.12s\n"
    ));
    out
}

const SYSTEM_PROMPT: &str =
    "You are a coding agent working in a Rust repository. Read files before editing them, keep \
edits minimal, run the tests after every change and report what you verified. Prefer the \
standard library over new dependencies. When a plan changes, say so explicitly. Never \
commit or push unless asked. Use the Read, Edit, Write, Grep and Bash tools; Bash runs in \
the repository root with a 120 s timeout.";

fn tool_schemas() -> String {
    let tools = [
        (
            "Read",
            "Read a file; returns it with line numbers.",
            json!({"file_path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}}),
        ),
        (
            "Edit",
            "Replace one exact string in a file.",
            json!({"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}}),
        ),
        (
            "Write",
            "Write a whole file.",
            json!({"file_path": {"type": "string"}, "content": {"type": "string"}}),
        ),
        (
            "Grep",
            "Search file contents with a regular expression.",
            json!({"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}}),
        ),
        (
            "Bash",
            "Run a shell command in the repository root.",
            json!({"command": {"type": "string"}, "timeout": {"type": "integer"}}),
        ),
    ];
    let list: Vec<Value> = tools
        .into_iter()
        .map(|(name, description, props)| {
            json!({"name": name, "description": description, "input_schema": {"type": "object", "properties": props}})
        })
        .collect();
    Value::Array(list).to_string()
}

/// The session, in order.
pub fn script() -> Vec<Action> {
    let exp_failures = [
        ("numbers::exponent_positive", "assertion `left == right` failed\n  left: Err(UnexpectedExponent { at: Position { line: 1, column: 2 } })\n right: Ok(Number(100000.0))"),
        ("numbers::exponent_upper_case", "assertion `left == right` failed\n  left: Err(UnexpectedExponent { at: Position { line: 1, column: 4 } })\n right: Ok(Number(2500.0))"),
        ("numbers::exponent_with_fraction", "assertion `left == right` failed\n  left: Err(UnexpectedExponent { at: Position { line: 1, column: 4 } })\n right: Ok(Number(0.015))"),
    ];
    vec![
        Action::Setup {
            system_prompt: SYSTEM_PROMPT.into(),
            tool_schemas: tool_schemas(),
        },
        // Turn 1: the bug report; the window fills while the agent investigates.
        user("`tinyjson::parse(\"1e5\")` returns `Err(UnexpectedExponent)`; numbers with an exponent are valid JSON. Please fix the lexer and add tests. The failing cases are in tests/numbers.rs."),
        bash("Let me reproduce the failure first.", "cargo test --test numbers", cargo_test(18, &exp_failures), 101),
        read("The error comes from the lexer; reading it.", "src/lexer.rs", rust_module("Byte-level lexer: turns input into tokens.", 1, 26)),
        read("And the number scanner it calls.", "src/number.rs", rust_module("Number literals: sign, integer, fraction, exponent.", 2, 22)),
        tool("Where is UnexpectedExponent raised?", "Grep", json!({"pattern": "UnexpectedExponent", "path": "src"}),
            "src/error.rs:14:    UnexpectedExponent { at: Position },\nsrc/number.rs:88:        return Err(LexError::UnexpectedExponent { at: Position::from_offset(input, pos) });\nsrc/number.rs:131:            b'e' => return Err(LexError::UnexpectedExponent { at: Position::from_offset(input, end) }),\n".into()),
        read("The tests that fail.", "tests/numbers.rs", rust_module("Number parsing tests.", 3, 12)),
        edit("`scan_exponent` stops at `e` instead of consuming it. Fixing the match arm.", "src/number.rs",
            "            b'e' => return Err(LexError::UnexpectedExponent { at: Position::from_offset(input, end) }),",
            "            b'e' | b'E' => end = scan_exponent(input, end + 1)?,"),
        bash("Running the number tests again.", "cargo test --test numbers", cargo_test(19, &exp_failures[1..]), 101),
        read("Upper-case E and fractions still fail: reading the fraction path.", "src/number.rs", rust_module("Number literals: sign, integer, fraction, exponent.", 4, 14)),
        edit("The fraction branch returns before looking for an exponent.", "src/number.rs",
            "    if input.get(end) == Some(&b'.') {\n        return scan_fraction(input, end + 1);\n    }",
            "    if input.get(end) == Some(&b'.') {\n        end = scan_fraction(input, end + 1)?.0;\n    }\n    if matches!(input.get(end), Some(b'e' | b'E')) {\n        end = scan_exponent(input, end + 1)?;\n    }"),
        bash("Tests again.", "cargo test --test numbers", cargo_test(21, &[]), 0),
        Action::Answer("Fixed: `scan_number` now consumes an exponent (`e`/`E`, optional sign, digits) after the integer or fraction part. `1e5`, `2.5E3` and `1.5e-2` parse; all 21 number tests pass.".into()),
        Action::TurnComplete,
        // Turn 2: more cases; a huge test log and a corpus push the input past the hard limit.
        user("Thanks. Also make sure `1e` and `1e+` give a clear error with the column, and run the whole suite including the corpus tests."),
        bash("Running the whole suite with the corpus.", "cargo test -- --include-ignored", cargo_test(64, &[
            ("corpus::numbers_json", "parse error at line 212, column 31: UnexpectedEnd while scanning an exponent"),
            ("errors::exponent_without_digits", "assertion `left == right` failed\n  left: Ok(Number(1.0))\n right: Err(ExpectedExponentDigits { at: Position { line: 1, column: 3 } })"),
        ]), 101),
        read("Reading the corpus entry that fails.", "tests/corpus/numbers.json", json_corpus(140)),
        read("And the error type.", "src/error.rs", rust_module("Errors with line and column.", 5, 10)),
        edit("An exponent needs at least one digit.", "src/number.rs",
            "    end = skip_digits(input, end);",
            "    let digits = skip_digits(input, end);\n    if digits == end {\n        return Err(LexError::ExpectedExponentDigits { at: Position::from_offset(input, end) });\n    }\n    end = digits;"),
        bash("Whole suite again.", "cargo test -- --include-ignored", cargo_test(65, &[]), 0),
        read("Adding regression tests next to the other error tests.", "tests/errors.rs", rust_module("Error position tests.", 7, 12)),
        edit("Two regression tests for a missing exponent digit.", "tests/errors.rs",
            "mod position {",
            "mod position {\n    #[test]\n    fn exponent_without_digits() {\n        assert_eq!(tinyjson::parse(\"1e\").unwrap_err().column(), 3);\n        assert_eq!(tinyjson::parse(\"1e+\").unwrap_err().column(), 4);\n    }"),
        bash("Whole suite with the new tests.", "cargo test -- --include-ignored", cargo_test(66, &[]), 0),
        Action::Answer("`1e` and `1e+` now fail with `ExpectedExponentDigits` at the column after the exponent marker. The whole suite passes, corpus included (66 tests).".into()),
        Action::Checkpoint { kind: CheckpointKind::Milestone, label: "exponent parsing fixed; whole suite passes".into() },
        Action::TurnComplete,
        // Turn 3: lint and benchmarks show a regression: the plan changes.
        user("Run clippy and the parse benchmarks before we wrap up."),
        bash("Clippy first.", "cargo clippy --all-targets", clippy(9), 0),
        bash("Now the benchmarks against main.", "cargo bench --bench parse -- --baseline main", bench(412, 288), 0),
        read("Number parsing regressed by ~40%. Looking at the hot loop.", "src/number.rs", rust_module("Number literals: sign, integer, fraction, exponent.", 6, 18)),
        Action::Checkpoint { kind: CheckpointKind::PlanPivot, label: "replace the hand-written float assembly with str::parse::<f64> on the scanned lexeme".into() },
        Action::Answer("Clippy: 9 `if_same_then_else` warnings in the lexer. Benchmarks: number parsing is ~40% slower than main because the new exponent path rebuilds the float digit by digit. New plan: scan the lexeme only, then let `str::parse::<f64>` convert it (exact and faster). Shall I go ahead?".into()),
        Action::TurnComplete,
        // Turn 4: the new approach.
        user("Yes, go with str::parse, and fix the clippy warnings while you're there."),
        read("Re-reading the number scanner before replacing the float assembly.", "src/number.rs", rust_module("Number literals: sign, integer, fraction, exponent.", 9, 22)),
        edit("Converting the scanned lexeme with the standard library.", "src/number.rs",
            "    let value = assemble_float(mantissa, exponent, negative);",
            "    // The lexeme is ASCII digits, sign, '.', 'e': valid UTF-8 and valid for f64::from_str.\n    let text = std::str::from_utf8(&input[pos..end]).expect(\"ascii lexeme\");\n    let value: f64 = text.parse().map_err(|_| LexError::InvalidNumber { at: Position::from_offset(input, pos) })?;"),
        read("Reading the lexer lines clippy flagged.", "src/lexer.rs", rust_module("Byte-level lexer: turns input into tokens.", 8, 16)),
        edit("Collapsing the identical branches clippy flagged.", "src/lexer.rs",
            "        if is_digit_byte(b) { end += 1 } else { end += 1 }",
            "        end += 1;"),
        bash("Tests.", "cargo test -- --include-ignored", cargo_test(66, &[]), 0),
        bash("Benchmarks again.", "cargo bench --bench parse -- --baseline main", bench(251, 288), 0),
        bash("And clippy.", "cargo clippy --all-targets -- -D warnings", clippy(0), 0),
        Action::Answer("Done: numbers are scanned, then converted with `str::parse::<f64>`; `assemble_float` is gone. Number parsing is now ~13% faster than main, clippy is clean, all 66 tests pass.".into()),
        Action::TurnComplete,
        // Turn 5: docs.
        user("Update CHANGELOG.md and the README's number section."),
        read("Reading the changelog.", "CHANGELOG.md", "# Changelog\n\n## 0.3.1\n- Fix: strings with escaped surrogate pairs.\n- Docs: examples for `parse_with`.\n\n## 0.3.0\n- `Value::as_f64`.\n- Streaming parser behind the `stream` feature.\n".repeat(6)),
        edit("Adding the entry.", "CHANGELOG.md", "# Changelog\n", "# Changelog\n\n## Unreleased\n- Fix: numbers with an exponent (`1e5`, `2.5E3`, `1.5e-2`) parse; `1e` reports `ExpectedExponentDigits`.\n- Perf: numbers are converted with `str::parse::<f64>` (~13% faster).\n"),
        read("And the README.", "README.md", "# tinyjson\n\nA small, strict JSON parser.\n\n## Numbers\n\nIntegers and fractions are supported. Exponents are not yet supported.\n\n```rust\nlet v = tinyjson::parse(\"[1, 2.5, -3]\")?;\nassert_eq!(v[1].as_f64(), Some(2.5));\n```\n".repeat(5)),
        edit("Documenting exponents.", "README.md", "Exponents are not yet supported.", "Exponents are supported (`1e5`, `2.5E3`, `1.5e-2`); a missing exponent digit is an error with its column."),
        Action::Answer("CHANGELOG.md has an Unreleased entry for the fix and the speed-up; the README documents exponents.".into()),
        Action::TurnComplete,
        // The user compacts by hand; the first attempt races an editor save.
        Action::Compact {
            instructions: "keep the public API changes and the benchmark numbers".into(),
            edited_during: Some(("README.md".into(), FileOp::Modified)),
        },
        Action::Compact {
            instructions: "keep the public API changes and the benchmark numbers".into(),
            edited_during: None,
        },
        // Turn 6: a screenshot the provider counts higher than the estimate.
        Action::User {
            text: "CI fails on Windows, see the screenshot. Can you check the workflow?".into(),
            screenshot: true,
        },
        Action::ProviderOverflow,
        read("Reading the workflow.", ".github/workflows/ci.yml", "name: ci\non: [push, pull_request]\njobs:\n  test:\n    strategy:\n      matrix:\n        os: [ubuntu-latest, macos-latest, windows-latest]\n    runs-on: ${{ matrix.os }}\n    steps:\n      - uses: actions/checkout@v4\n      - run: cargo test -- --include-ignored\n        env:\n          CORPUS: tests/corpus/*.json\n".into()),
        edit("The glob is not expanded by cmd.exe; the tests read the folder instead.", ".github/workflows/ci.yml", "        env:\n          CORPUS: tests/corpus/*.json\n", ""),
        Action::Answer("The Windows job failed because `CORPUS: tests/corpus/*.json` is not expanded there; the corpus test now lists the folder itself and the variable is gone.".into()),
        Action::TurnComplete,
    ]
}
