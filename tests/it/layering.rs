//! The layering rule, read from the code's imports: every module of `src/` and of the crates in
//! `crates/` has its own place in `ORDER`, and may use only modules placed below it; and no
//! file of them takes part in an import loop, inside a module or across modules. Checked on the
//! source text, so a new module fails here until it is placed. The rule is for the product's
//! code: an item under `#[cfg(test)]` (a file's `mod tests`, a test helper) is left out, as tests
//! build their fixtures from anything in their crate.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

/// Every module, lowest first: each may use those above it in this list, never one below.
/// The files inside one module may use each other, as long as they form no loop.
const ORDER: &[&str] = &[
    // Leaves: helpers and plain data that use nothing else of SOBA.
    "util",
    "files",
    "redact",
    "tool_mapping",
    // Counting text (the tokenizer's name, its rules), a model's window and limits as data,
    // and learning a smaller window from a provider's overflow.
    "tokens",
    "limits",
    "window",
    // Configuration, parsed and validated on those types.
    "config",
    // Who may set what, and the configuration's layers as read, with trust applied.
    "trust",
    "config::layers",
    // The session's data model: triggers, capsules, entries and how a log line decodes.
    "session::trigger",
    "session::capsule",
    "session::entry",
    "session::decode",
    "session::count",
    "session::foreign",
    "session::calls",
    "session::store",
    // The budget, above configuration, entries and counting.
    "budget",
    // The session: its index of entries, the model view and turn facts computed over the index,
    // the tally kept beside it, then its log and what is computed over them.
    "session::index",
    "session::view",
    "session::turn",
    "session::tally",
    "session",
    "session::token_file",
    "session::log",
    "session::calibrate",
    "session::rewind",
    "session::unseen_measure",
    "session::unseen_priors",
    // Capsules and compaction: the last of the engine (the core crate).
    "capsule",
    "compaction",
    // Builders of sessions and logs for tests (the `test-support` feature).
    "session::testing",
    // Built on the engine.
    "import",
    "hook",
    "attach",
    "preview",
    "report",
    // Provider wire formats: what the proxy reads and sends, and the summarizer's requests.
    "wire",
    "summarize",
    "flight",
    // The capsule-quality benchmark: imports transcripts, plans and summarizes.
    "eval",
    "accuracy",
    "inspect",
    "replay",
    "demo",
    // Servers.
    "daemon",
    "proxy",
    "schemas",
    // The command line.
    "cli",
    "main",
];

/// Files that only declare a crate's modules.
const NOT_PLACED: &[&str] = &["lib"];

/// The place of a module path: that of the longest entry of `ORDER` it starts with.
fn place_of(path: &[String]) -> Option<(usize, &'static str)> {
    ORDER
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            let entry: Vec<&str> = m.split("::").collect();
            entry.len() <= path.len() && entry.iter().zip(path).all(|(a, b)| a == b)
        })
        .max_by_key(|(_, m)| m.len())
        .map(|(place, m)| (place, *m))
}

/// The module path of a file below a crate's `src/`: `session/capsule/mod.rs` →
/// `[session, capsule]`.
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

/// One source file: where it is shown from (`src/config/mod.rs`), its module path and text.
struct Source {
    shown: String,
    module: Vec<String>,
    text: String,
}

impl Source {
    fn new(shown: &str, text: &str) -> Source {
        let relative = shown.split_once("src/").map_or(shown, |(_, r)| r);
        Source {
            shown: shown.to_string(),
            module: module_path(Path::new(relative)),
            text: text.to_string(),
        }
    }
}

/// The length of a type path naming a crate module that a string literal starting here holds
/// (`crate::a::B`, `Vec<super::b::C>`), up to its closing quote; `None` for any other string.
fn path_in_string(rest: &[char]) -> Option<usize> {
    let len = rest.iter().position(|&c| c == '"')?;
    let body: String = rest[..len].iter().collect();
    let path_chars = body
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '<' | '>' | ',' | ' '));
    let names_a_module = ["crate::", "super::", "self::", "soba_core::"]
        .iter()
        .any(|root| body.contains(root));
    (path_chars && names_a_module && !body.is_empty()).then_some(len)
}

/// `text` with comments, string and character literals blanked out (line breaks kept), so
/// that only code is searched and line numbers still hold. A string that is a type path naming
/// a module of SOBA (serde's and schemars' `with = "…"`) is kept: it is a use.
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
        } else if c == '"' && path_in_string(&chars[i + 1..]).is_some() {
            // A type path in an attribute (`#[schemars(with = "Vec<crate::a::B>")]`) is a use.
            let len = path_in_string(&chars[i + 1..]).unwrap();
            out.push(' ');
            out.extend(&chars[i + 1..i + 1 + len]);
            out.push(' ');
            i += len + 2;
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

/// `text` as code only (see [`code_only`]), with every item under `#[cfg(test)]` blanked out.
fn product_code(text: &str) -> String {
    let code = code_only(text);
    let mut out: Vec<char> = code.chars().collect();
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(test)]") {
        let start = from + found;
        let chars_before = code[..start].chars().count();
        let rest: Vec<char> = code[start..].chars().collect();
        // The item ends at its first `;` outside braces, or where its first brace closes.
        let mut depth = 0;
        let mut end = rest.len();
        for (i, &c) in rest.iter().enumerate().skip("#[cfg(test)]".len()) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        for c in &mut out[chars_before..chars_before + end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = start + rest[..end].iter().map(|c| c.len_utf8()).sum::<usize>();
    }
    out.into_iter().collect()
}

/// The modules that `code` (of the file whose module is `file_module`) names, as absolute
/// paths with their line numbers: `crate::a::b`, `soba_core::a::b` (the core crate from the
/// binary), `crate::{a::b, c}`, `super::a` and `self::a` (from the file's module or an inline
/// module in it, like `mod tests`), and `child::x` where `child` is a module below this one
/// (`pub use child::X;` in a `mod.rs`). `known` holds the module path of every file.
fn modules_used(
    file_module: &[String],
    code: &str,
    known: &HashSet<Vec<String>>,
) -> Vec<(usize, Vec<String>)> {
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
        let here = || -> Vec<String> {
            let mut here: Vec<String> = file_module.to_vec();
            here.extend(inline.iter().map(|(name, _)| name.clone()));
            here
        };
        let ident = if at_boundary && is_ident(c) {
            ident_at(at)
        } else {
            ""
        };
        let after_ident = &code[at + ident.len()..];
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
            _ if ident == "mod" => {
                let name = ident_at(at + 4);
                let after = code[at + 4 + name.len()..].trim_start();
                if after.starts_with('{') {
                    next_inline = Some(name.to_string());
                }
            }
            _ if !ident.is_empty() && after_ident.starts_with("::") => {
                let here = here();
                let (base, rest): (Vec<String>, &str) = match ident {
                    "crate" | "soba_core" | "soba" => (Vec::new(), &after_ident[2..]),
                    "self" => (here, &after_ident[2..]),
                    "super" => {
                        let mut rest = after_ident;
                        let mut climbs = 0;
                        while let Some(r) = rest.strip_prefix("::") {
                            climbs += 1;
                            rest = r.strip_prefix("super").unwrap_or(r);
                            if !r.starts_with("super") {
                                break;
                            }
                        }
                        (here[..here.len().saturating_sub(climbs)].to_vec(), rest)
                    }
                    child => {
                        let mut below = here.clone();
                        below.push(child.to_string());
                        if !known.contains(&below) {
                            at += ident.len();
                            continue;
                        }
                        (here, &code[at..])
                    }
                };
                for path in group_items(rest).into_iter().map(|item| {
                    let mut path = base.clone();
                    path.extend(item);
                    path
                }) {
                    if !path.is_empty() {
                        used.push((line, path));
                    }
                }
                at += ident.len();
                continue;
            }
            _ => {}
        }
        if ident.is_empty() {
            at += c.len_utf8();
        } else {
            at += ident.len();
        }
    }
    used
}

/// The paths a use names from where `rest` starts: `a::b::C` → `[a, b, C]`; a group
/// `{a::b, c::{d, e}}` → each of its items.
fn group_items(rest: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut prefix = Vec::new();
    let mut item = rest.trim_start();
    loop {
        if let Some(group) = item.strip_prefix('{') {
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
            return items
                .into_iter()
                .flat_map(group_items)
                .map(|tail| prefix.iter().cloned().chain(tail).collect())
                .collect();
        }
        let segment = item.split(|c: char| !is_ident(c)).next().unwrap_or("");
        if segment.is_empty() {
            break;
        }
        prefix.push(segment.to_string());
        match item[segment.len()..].strip_prefix("::") {
            Some(r) => item = r.trim_start(),
            None => break,
        }
    }
    vec![prefix]
}

/// Every use of a module placed above the user in `ORDER`, and every module with no place.
fn violations(files: &[Source]) -> Vec<String> {
    let known: HashSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut found = Vec::new();
    for file in files {
        if file.module.len() == 1 && NOT_PLACED.contains(&file.module[0].as_str()) {
            continue;
        }
        let Some((own_place, own)) = place_of(&file.module) else {
            found.push(format!(
                "{}: module `{}` has no place; add it to ORDER in {}",
                file.shown,
                file.module.join("::"),
                file!()
            ));
            continue;
        };
        for (line, used) in modules_used(&file.module, &product_code(&file.text), &known) {
            if let Some((_, name)) = place_of(&used).filter(|(p, _)| *p > own_place) {
                found.push(format!(
                    "{}:{line}: `{own}` uses `{name}`, which ORDER places above it",
                    file.shown
                ));
            }
        }
    }
    found
}

/// The file a used path lands in: the file whose module is its longest prefix.
fn file_of(path: &[String], by_module: &HashMap<Vec<String>, usize>) -> Option<usize> {
    (1..=path.len())
        .rev()
        .find_map(|n| by_module.get(&path[..n]).copied())
}

/// Every import loop among `files`, one line each: the files of the loop in order, back to
/// the first, each with the line of its first use of the next.
fn import_loops(files: &[Source]) -> Vec<String> {
    import_knots(files)
        .into_iter()
        .map(|(_, shown)| shown)
        .collect()
}

/// Each set of files that use each other in a loop (Tarjan's strongly connected components of
/// more than one file), with its shortest loop shown as [`import_loops`] gives it.
fn import_knots(files: &[Source]) -> Vec<(BTreeSet<String>, String)> {
    let known: HashSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let by_module: HashMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    // uses[a][b]: the first line of `a` that uses `b`.
    let mut uses: Vec<BTreeMap<usize, usize>> = vec![BTreeMap::new(); files.len()];
    for (a, file) in files.iter().enumerate() {
        for (line, used) in modules_used(&file.module, &product_code(&file.text), &known) {
            if let Some(b) = file_of(&used, &by_module).filter(|&b| b != a) {
                uses[a].entry(b).or_insert(line);
            }
        }
    }
    strongly_connected(&uses)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let members: BTreeSet<usize> = component.iter().copied().collect();
            let start = *members.iter().min_by_key(|&&i| &files[i].shown).unwrap();
            let mut ring = shortest_cycle(start, &members, &uses);
            ring.push(start);
            let steps: Vec<String> = ring
                .windows(2)
                .map(|w| format!("{} (line {})", files[w[0]].shown, uses[w[0]][&w[1]]))
                .collect();
            let shown = format!(
                "import loop: {} → {}",
                steps.join(" → "),
                files[start].shown
            );
            (
                members.iter().map(|&i| files[i].shown.clone()).collect(),
                shown,
            )
        })
        .collect()
}

/// Tarjan's strongly connected components of the graph `uses`.
fn strongly_connected(uses: &[BTreeMap<usize, usize>]) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        uses: &'a [BTreeMap<usize, usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk, v: usize) {
        w.index[v] = Some(w.next);
        w.low[v] = w.next;
        w.next += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.uses[v].keys() {
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(i) if w.on_stack[u] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                component.push(u);
                if u == v {
                    break;
                }
            }
            w.found.push(component);
        }
    }
    let n = uses.len();
    let mut w = Walk {
        uses,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if w.index[v].is_none() {
            visit(&mut w, v);
        }
    }
    w.found
}

/// The shortest way from `start` back to itself through `members`, starting with `start`.
fn shortest_cycle(
    start: usize,
    members: &BTreeSet<usize>,
    uses: &[BTreeMap<usize, usize>],
) -> Vec<usize> {
    let mut came_from: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &u in uses[v].keys().filter(|u| members.contains(u)) {
            if u == start {
                let mut path = vec![v];
                while let Some(&p) = came_from.get(path.last().unwrap()) {
                    path.push(p);
                }
                path.reverse();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(u) {
                e.insert(v);
                queue.push_back(u);
            }
        }
    }
    unreachable!("a member of a strongly connected component lies on a cycle")
}

fn read_sources(dir: &Path, crate_root: &Path, shown_root: &str, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_sources(&p, crate_root, shown_root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let relative = p.strip_prefix(crate_root).unwrap();
            out.push(Source::new(
                &format!("{shown_root}{}", relative.display()),
                &text,
            ));
        }
    }
}

/// The sources of `src/` and of every crate in `crates/`.
fn all_sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    read_sources(&root.join("src"), &root.join("src"), "src/", &mut files);
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        let mut crates: Vec<PathBuf> = crates.map(|e| e.unwrap().path()).collect();
        crates.sort();
        for krate in crates {
            let src = krate.join("src");
            let shown = format!(
                "crates/{}/src/",
                krate.file_name().unwrap().to_string_lossy()
            );
            read_sources(&src, &src, &shown, &mut files);
        }
    }
    assert!(files.len() > 50, "read {} files", files.len());
    files
}

#[test]
fn no_module_uses_one_placed_above_it() {
    let found = violations(&all_sources());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_file_takes_part_in_an_import_loop() {
    let loops = import_loops(&all_sources());
    assert!(loops.is_empty(), "{}", loops.join("\n"));
}

#[test]
fn every_placed_module_exists() {
    let files = all_sources();
    for m in ORDER {
        let path: Vec<String> = m.split("::").map(str::to_string).collect();
        assert!(
            files.iter().any(|f| f.module == path),
            "ORDER names `{m}`, which no crate has"
        );
    }
}

#[test]
fn a_use_of_a_module_placed_above_is_reported_with_its_file_and_line() {
    let found = violations(&[
        Source::new(
            "src/config/mod.rs",
            "use crate::util::now;\n\nuse crate::capsule::CapsuleEntry;\nfn f(s: &mut crate::session::Session) {}\n",
        ),
        Source::new(
            "crates/soba-core/src/session/capsule/render.rs",
            "fn f() {\n    super::super::super::compaction::run();\n}\n",
        ),
        Source::new(
            "src/tokens.rs",
            "use crate::{\n    util::x,\n    session::{entry::Entry, view::ModelView},\n};\n",
        ),
        Source::new(
            "src/session/entry.rs",
            "use super::view::ModelView;\nmod tests {\n    use super::*;\n    use super::super::Session;\n}\n",
        ),
        Source::new("src/session/view.rs", "use super::entry::Entry;\nlet x = soba_core::proxy::serve;"),
        Source::new("src/newthing.rs", "fn f() {}"),
    ]);
    assert_eq!(
        found,
        [
            "src/config/mod.rs:3: `config` uses `capsule`, which ORDER places above it",
            "src/config/mod.rs:4: `config` uses `session`, which ORDER places above it",
            "crates/soba-core/src/session/capsule/render.rs:2: `session::capsule` uses `compaction`, which ORDER places above it",
            "src/tokens.rs:1: `tokens` uses `session::entry`, which ORDER places above it",
            "src/tokens.rs:1: `tokens` uses `session::view`, which ORDER places above it",
            "src/session/entry.rs:1: `session::entry` uses `session::view`, which ORDER places above it",
            "src/session/entry.rs:4: `session::entry` uses `session`, which ORDER places above it",
            "src/session/view.rs:2: `session::view` uses `proxy`, which ORDER places above it",
            &format!("src/newthing.rs: module `newthing` has no place; add it to ORDER in {}", file!()),
        ]
    );
}

#[test]
fn an_import_loop_is_reported_with_each_file_and_line() {
    let loops = import_loops(&[
        Source::new("src/a.rs", "fn f() {}\nuse crate::b::B;\n"),
        Source::new("src/b.rs", "use crate::c::{C, D};\n"),
        Source::new("src/c.rs", "\n\nfn g() -> super::a::A {}\n"),
        Source::new("src/d.rs", "use crate::a::A;\n"),
    ]);
    assert_eq!(
        loops,
        ["import loop: src/a.rs (line 2) → src/b.rs (line 1) → src/c.rs (line 3) → src/a.rs"]
    );
}

#[test]
fn a_parent_that_re_exports_a_child_using_it_is_a_loop() {
    let loops = import_loops(&[
        Source::new(
            "src/p/mod.rs",
            "pub mod child;\npub use child::X;\npub struct Y;\n",
        ),
        Source::new("src/p/child.rs", "use super::Y;\npub struct X;\n"),
    ]);
    assert_eq!(
        loops,
        ["import loop: src/p/child.rs (line 1) → src/p/mod.rs (line 2) → src/p/child.rs"]
    );
    // Declaring a child is no use of it.
    let loops = import_loops(&[
        Source::new("src/p/mod.rs", "pub mod child;\npub struct Y;\n"),
        Source::new("src/p/child.rs", "use super::Y;\n"),
    ]);
    assert!(loops.is_empty(), "{loops:?}");
}

#[test]
fn a_type_path_in_an_attribute_string_is_a_use() {
    let loops = import_loops(&[
        Source::new(
            "src/daemon/protocol.rs",
            "#[derive(JsonSchema)]\nstruct P {\n    #[schemars(with = \"Vec<crate::schemas::E>\")]\n    e: Vec<Value>,\n}\n",
        ),
        Source::new("src/schemas.rs", "use crate::daemon::protocol::P;\n"),
    ]);
    assert_eq!(
        loops,
        ["import loop: src/daemon/protocol.rs (line 3) → src/schemas.rs (line 1) → src/daemon/protocol.rs"]
    );
}

#[test]
fn test_code_is_left_out() {
    let loops = import_loops(&[
        Source::new(
            "src/a.rs",
            "use crate::b::B;\n#[cfg(test)]\nmod tests {\n    use crate::b::{self, C};\n}\n",
        ),
        Source::new(
            "src/b.rs",
            "pub struct B;\n#[cfg(test)]\nuse crate::a::A;\n#[cfg(test)]\nmod tests {\n    fn f() -> crate::a::A { todo!() }\n}\nfn g() -> crate::c::C {}\n",
        ),
    ]);
    assert!(loops.is_empty(), "{loops:?}");
    let found = violations(&[Source::new(
        "src/util.rs",
        "#[cfg(test)]\nmod tests {\n    use crate::session::Session;\n}\nfn f() -> crate::cli::X {}\n",
    )]);
    assert_eq!(
        found,
        ["src/util.rs:5: `util` uses `cli`, which ORDER places above it"]
    );
}

#[test]
fn comments_and_strings_are_not_uses() {
    let raw = violations(&[Source::new(
        "src/session/log.rs",
        "let b = br#\"}\"#; let c = b'}'; let d = '\\u{7d}';\nlet e = crate::proxy::x;",
    )]);
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert!(raw[0].starts_with("src/session/log.rs:2:"), "{raw:?}");
    let found = violations(&[Source::new(
        "src/config/mod.rs",
        concat!(
            "//! See `crate::capsule`.\n",
            "/* crate::daemon /* nested */ crate::proxy */\n",
            "let s = \"use crate::capsule::X;\";\n",
            "let r = r#\"crate::\"compaction\"#;\n",
            "let q = '\"'; let t = crate::util::x; // crate::cli\n",
            "fn f<'a>(x: &'a str) -> &'a str { x }\n",
        ),
    )]);
    assert!(found.is_empty(), "{found:?}");
}
