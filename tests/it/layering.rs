//! The layering rule: a module of `src/` may use modules of its own layer and the layers
//! below it, never one above. Checked on the source text, so a new module fails here until
//! it is placed in `LAYERS`.

use std::path::{Path, PathBuf};

/// The layers, lowest first. Modules of one layer may use each other.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaves", &["util", "files", "redact", "tool_mapping"]),
    // One layer because they use each other: counting counts session entries and renders
    // capsules, the budget reads the compaction config and the usage that entries report, config
    // validates with the budget's limits and restricts untrusted layers (trust).
    (
        "session data, counting, budget and configuration",
        &[
            "session::entry",
            "session::decode",
            "session::capsule",
            "tokens",
            "budget",
            "window",
            "config",
            "trust",
        ],
    ),
    ("the session log", &["session"]),
    ("capsules and compaction", &["capsule", "compaction"]),
    (
        "built on compaction",
        &[
            "summarize",
            "import",
            "attach",
            "report",
            "flight",
            "accuracy",
            "inspect",
            "preview",
            "replay",
            "hook",
            "demo",
            // The capsule-quality benchmark: imports transcripts, plans and summarizes.
            "eval",
        ],
    ),
    ("servers", &["daemon", "proxy", "schemas"]),
    ("command line", &["cli", "main"]),
];

/// Files that only declare the modules.
const NOT_A_LAYER: &[&str] = &["lib"];

/// The layer of a module path: that of the longest entry of `LAYERS` it starts with.
fn layer_of(path: &[String]) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, (_, modules))| modules.iter().map(move |m| (layer, *m)))
        .filter(|(_, m)| {
            let entry: Vec<&str> = m.split("::").collect();
            entry.len() <= path.len() && entry.iter().zip(path).all(|(a, b)| a == b)
        })
        .max_by_key(|(_, m)| m.len())
}

/// The module path of a file below `src/`: `session/capsule/mod.rs` → `[session, capsule]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// `text` with comments, string and character literals blanked out (line breaks kept), so
/// that only code is searched and line numbers still hold.
fn code_only(text: &str) -> String {
    let ident_before = |before: &[char]| {
        before
            .last()
            .is_some_and(|p| p.is_alphanumeric() || *p == '_')
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && (!ident_before(&chars[..i]) || chars[i - 1] == 'b' && !ident_before(&chars[..i - 1]))
        {
            // A raw string: r"…", r#"…"#, br"…", …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push(' ');
            for _ in 0..=hashes {
                out.push(' ');
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        for _ in 0..=hashes {
                            out.push(' ');
                        }
                        break;
                    }
                    Some(&ch) => {
                        blank(&mut out, ch);
                        j += 1;
                    }
                }
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('"', '\n', '\''); a lifetime has no closing quote.
            let mut j = i + 1;
            if chars.get(j) == Some(&'\\') {
                j += 1;
            }
            j += 1;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            for _ in i..=j.min(chars.len() - 1) {
                out.push(' ');
            }
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The modules that `code` (of the file whose module is `file_module`) names, as absolute
/// paths with their line numbers: `crate::a::b`, `crate::{a::b, c}`, `super::a` (from the file's
/// module or an inline module in it, like `mod tests`).
fn modules_used(file_module: &[String], code: &str) -> Vec<(usize, Vec<String>)> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let ident_at = |at: usize| -> &str {
        let end = code[at..]
            .find(|c: char| !is_ident(c))
            .map_or(code.len(), |n| at + n);
        &code[at..end]
    };
    let mut used = Vec::new();
    let mut line = 1;
    // Inline modules open here: their name and the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut next_inline: Option<String> = None;
    let mut at = 0;
    while at < code.len() {
        let c = code[at..].chars().next().unwrap();
        let at_boundary = !code[..at]
            .chars()
            .next_back()
            .is_some_and(|p| is_ident(p) || p == ':' || p == '$');
        match c {
            '\n' => line += 1,
            '{' => {
                depth += 1;
                if let Some(name) = next_inline.take() {
                    inline.push((name, depth));
                }
            }
            '}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth
                    .checked_sub(1)
                    .expect("balanced braces outside strings and comments");
            }
            ';' => next_inline = None,
            _ if at_boundary && code[at..].starts_with("mod ") => {
                let name = ident_at(at + 4);
                let after = code[at + 4 + name.len()..].trim_start();
                if after.starts_with('{') {
                    next_inline = Some(name.to_string());
                }
            }
            _ if at_boundary
                && (code[at..].starts_with("crate::") || code[at..].starts_with("super::")) =>
            {
                let mut here: Vec<String> = file_module.to_vec();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                let mut rest = &code[at..];
                let base: Vec<String> = if let Some(r) = rest.strip_prefix("crate::") {
                    rest = r;
                    Vec::new()
                } else {
                    let mut climbs = 0;
                    while let Some(r) = rest.strip_prefix("super::") {
                        climbs += 1;
                        rest = r;
                    }
                    here[..here.len().saturating_sub(climbs)].to_vec()
                };
                let items: Vec<&str> = match rest.strip_prefix('{') {
                    // `crate::{a::b, c::{d, e}}`: each top-level item of the group.
                    Some(group) => {
                        let mut items = Vec::new();
                        let (mut nested, mut from) = (0, 0);
                        for (i, c) in group.char_indices() {
                            match c {
                                '{' => nested += 1,
                                '}' if nested == 0 => {
                                    items.push(&group[from..i]);
                                    break;
                                }
                                '}' => nested -= 1,
                                ',' if nested == 0 => {
                                    items.push(&group[from..i]);
                                    from = i + 1;
                                }
                                _ => {}
                            }
                        }
                        items
                    }
                    None => vec![rest],
                };
                for item in items {
                    let mut path = base.clone();
                    let mut item = item.trim_start();
                    loop {
                        let segment = item.split(|c: char| !is_ident(c)).next().unwrap_or("");
                        if segment.is_empty() {
                            break;
                        }
                        path.push(segment.to_string());
                        match item[segment.len()..].strip_prefix("::") {
                            Some(r) => item = r,
                            None => break,
                        }
                    }
                    if !path.is_empty() {
                        used.push((line, path));
                    }
                }
            }
            _ => {}
        }
        at += c.len_utf8();
    }
    used
}

/// Every use of a higher layer in `files` (paths relative to `src/`, with their text), and
/// every module missing from `LAYERS`.
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (relative, text) in files {
        let module = module_path(relative);
        if module.len() == 1 && NOT_A_LAYER.contains(&module[0].as_str()) {
            continue;
        }
        let Some((own_layer, own)) = layer_of(&module) else {
            found.push(format!(
                "src/{}: module `{}` is in no layer; add it to LAYERS in {}",
                relative.display(),
                module.join("::"),
                file!()
            ));
            continue;
        };
        for (line, used) in modules_used(&module, &code_only(text)) {
            if let Some((layer, name)) = layer_of(&used).filter(|(l, _)| *l > own_layer) {
                found.push(format!(
                    "src/{}:{line}: `{own}` ({}) uses `{name}` ({}), a higher layer",
                    relative.display(),
                    LAYERS[own_layer].0,
                    LAYERS[layer].0
                ));
            }
        }
    }
    found
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p.strip_prefix(root).unwrap().to_path_buf(), text));
        }
    }
}

#[test]
fn no_module_uses_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(
        files.len() > 50,
        "read {} files from {}",
        files.len(),
        src.display()
    );
    let found = violations(&files);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn every_layer_module_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (_, modules) in LAYERS {
        for m in *modules {
            let m = m.replace("::", "/");
            assert!(
                src.join(format!("{m}.rs")).is_file() || src.join(&m).join("mod.rs").is_file(),
                "LAYERS names `{m}`, which src/ does not have"
            );
        }
    }
}

#[test]
fn an_upward_use_is_reported_with_its_file_and_line() {
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_string());
    let found = violations(&[
        file(
            "config.rs",
            "use crate::util::now;\n\nuse crate::capsule::CapsuleEntry;\nfn f(s: &mut crate::session::Session) {}\n",
        ),
        file(
            "session/capsule/render.rs",
            "fn f() {\n    super::super::super::compaction::run();\n}\n",
        ),
        file(
            "tokens/mod.rs",
            "use crate::{\n    util::x,\n    session::{entry::Entry, view::ModelView},\n};\n",
        ),
        file(
            "session/entry.rs",
            "use super::view::ModelView;\nmod tests {\n    use super::*;\n    use super::super::Session;\n}\n",
        ),
        file("session/view.rs", "use super::entry::Entry;\nlet x = crate::proxy::serve;"),
        file("newthing.rs", "fn f() {}"),
    ]);
    let data = "session data, counting, budget and configuration";
    assert_eq!(
        found,
        [
            format!("src/config.rs:3: `config` ({data}) uses `capsule` (capsules and compaction), a higher layer"),
            format!("src/config.rs:4: `config` ({data}) uses `session` (the session log), a higher layer"),
            format!("src/session/capsule/render.rs:2: `session::capsule` ({data}) uses `compaction` (capsules and compaction), a higher layer"),
            format!("src/tokens/mod.rs:1: `tokens` ({data}) uses `session` (the session log), a higher layer"),
            format!("src/session/entry.rs:1: `session::entry` ({data}) uses `session` (the session log), a higher layer"),
            format!("src/session/entry.rs:4: `session::entry` ({data}) uses `session` (the session log), a higher layer"),
            "src/session/view.rs:2: `session` (the session log) uses `proxy` (servers), a higher layer".to_string(),
            format!("src/newthing.rs: module `newthing` is in no layer; add it to LAYERS in {}", file!()),
        ]
    );
}

#[test]
fn comments_and_strings_are_not_uses() {
    let raw = violations(&[(
        PathBuf::from("session/log.rs"),
        "let b = br#\"}\"#; let c = b'}'; let d = '\\u{7d}';\nlet e = crate::proxy::x;".to_string(),
    )]);
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert!(raw[0].starts_with("src/session/log.rs:2:"), "{raw:?}");
    let found = violations(&[(
        PathBuf::from("config.rs"),
        concat!(
            "//! See `crate::capsule`.\n",
            "/* crate::daemon /* nested */ crate::proxy */\n",
            "let s = \"use crate::capsule::X;\";\n",
            "let r = r#\"crate::\"compaction\"#;\n",
            "let q = '\"'; let t = crate::util::x; // crate::cli\n",
            "fn f<'a>(x: &'a str) -> &'a str { x }\n",
        )
        .to_string(),
    )]);
    assert!(found.is_empty(), "{found:?}");
}
