//! What a shell command in a tool call reads, modifies and verifies.
//!
//! Commands are parsed by a real shell parser (`brush-parser`), so heredoc bodies, quoting,
//! redirections and `2>&1` are what a shell makes of them, never "commands" or "files". Which
//! words of a simple command are paths is per-command knowledge (`cat FILE`, `sed -i SCRIPT
//! FILE`, `cp SRC… DST`, `git checkout -- FILE`, …); a word that expands (`$X`, `$(…)`, a glob)
//! is never taken for a path. A patch in a heredoc or argument of `apply_patch`, `git apply` or
//! `patch` is read as a patch: its headers name the modified files.

use brush_parser::ast;
use serde_json::Value;

/// What one shell command line reads, modifies, and which verification it runs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShellFacts {
    pub reads: Vec<String>,
    pub modifies: Vec<String>,
    /// Of `modifies`, the paths the command deleted (`rm`, `git rm`).
    pub deletes: Vec<String>,
    /// Of `modifies`, renames as (from, to) (`mv A B`, `git mv A B`).
    pub renames: Vec<(String, String)>,
    /// The verification command, normalised (`cd …`, env assignments and `timeout` removed).
    pub verification: Option<String>,
    /// The working directory the line leaves its shell in (`cd pkg` at the top level), for a
    /// shell that persists between calls; `None` when the line does not change it.
    pub final_cwd: Option<String>,
    /// Work trees the line created (`git worktree add PATH`): the session may work there.
    pub worktrees: Vec<String>,
}

/// Facts of a tool's command argument: a script string is parsed; an argv array is already
/// words (`["apply_patch", PATCH]`, `["bash", "-lc", SCRIPT]`), so it is analysed as one
/// simple command and no word of it is re-split.
pub fn analyze_command_value(v: &Value) -> Option<ShellFacts> {
    analyze_command_value_in(v, None)
}

/// [`analyze_command_value`] for a command run in `cwd` (a tool's `workdir`, or where a
/// persistent shell was left): relative paths are taken from there.
pub fn analyze_command_value_in(v: &Value, cwd: Option<&str>) -> Option<ShellFacts> {
    match v {
        Value::String(s) => Some(analyze_shell_in(s, cwd)),
        Value::Array(parts) => {
            let words: Vec<String> = parts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            if words.is_empty() {
                return None;
            }
            let mut walk = Walk::starting_in(cwd);
            let words: Vec<Word> = words.into_iter().map(Word::literal).collect();
            walk.simple(&words, &[]);
            Some(walk.finish())
        }
        _ => None,
    }
}

/// Reads, modifications and the verification command of a shell command line.
///
/// A line the parser refuses (an unterminated quote, a truncated heredoc) yields no paths:
/// a guess there is how heredoc bodies used to become "files". Its verification command is
/// still recognised when the line is one plain command.
pub fn analyze_shell(line: &str) -> ShellFacts {
    analyze_shell_in(line, None)
}

/// [`analyze_shell`] for a line run in `cwd`.
pub fn analyze_shell_in(line: &str, cwd: Option<&str>) -> ShellFacts {
    let mut walk = Walk::starting_in(cwd);
    match parse(line) {
        Some(program) => {
            for c in &program.complete_commands {
                walk.list(c);
            }
        }
        None => {
            let words: Vec<Word> = line
                .split_whitespace()
                .map(|w| Word::literal(w.to_string()))
                .collect();
            let single = !line.contains(['\n', ';', '|', '&', '<', '>', '\'', '"', '`', '$']);
            if single {
                if let Some(check) = verification_of(&words) {
                    walk.checks.push(check);
                }
            }
        }
    }
    walk.finish()
}

fn parse(line: &str) -> Option<ast::Program> {
    let options = brush_parser::ParserOptions::default();
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(line.as_bytes()), &options);
    parser.parse_program().ok()
}

fn is_shell(s: &str) -> bool {
    matches!(base_name(s), "bash" | "sh" | "zsh" | "dash" | "ksh")
}

fn is_command_flag(flag: &str) -> bool {
    flag.starts_with('-') && !flag.starts_with("--") && flag.contains('c')
}

fn base_name(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// A shell word: its text after quote removal, and whether it is a literal (no expansion,
/// no glob), i.e. the text is what the command receives.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    literal: bool,
}

impl Word {
    fn literal(text: String) -> Self {
        Word {
            text,
            literal: true,
        }
    }

    fn from_ast(w: &ast::Word) -> Self {
        let raw = &w.value;
        let expands = raw.contains(['$', '`']) || has_unquoted_glob(raw);
        Word {
            text: brush_parser::unquote_str(raw),
            literal: !expands,
        }
    }

    fn is(&self, s: &str) -> bool {
        self.text == s
    }
}

/// `*`, `?`, `[` or `{` outside quotes: the shell expands the word, so it names no one file.
fn has_unquoted_glob(raw: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in raw.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (None, '\\') => escaped = true,
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '*' | '?' | '[' | '{') => return true,
            _ => {}
        }
    }
    false
}

/// A word usable as a path: literal, and shaped like one.
fn path_word(w: &Word) -> Option<&str> {
    (w.literal && looks_like_path(&w.text)).then_some(w.text.as_str())
}

fn looks_like_path(p: &str) -> bool {
    !p.is_empty()
        && p != "-"
        && p != "."
        && p != ".."
        && !p.starts_with('-')
        && !p.starts_with("/dev/")
        && !p.contains(['\n', '\r', '\0', '<', '>', '|', ';', '&'])
        && p.chars().any(|c| c.is_alphanumeric())
}

/// A path operand of a search tool (`grep PATTERN PATH…`) that names a file rather than a
/// folder to search: its last component has an extension or is a well-known file name.
fn looks_like_file(p: &str) -> bool {
    let name = p.trim_end_matches('/').rsplit('/').next().unwrap_or(p);
    let has_extension = name
        .char_indices()
        .any(|(i, c)| c == '.' && i > 0 && i + 1 < name.len());
    has_extension
        || matches!(
            name,
            "Makefile" | "Dockerfile" | "Justfile" | "LICENSE" | "README" | "Gemfile" | "Rakefile"
        )
}

/// Walks a parsed program, keeping the working directory that `cd` sets.
#[derive(Default)]
struct Walk {
    cwd: Option<String>,
    /// Where the line started.
    start: Option<String>,
    reads: Vec<String>,
    modifies: Vec<String>,
    deletes: Vec<String>,
    renames: Vec<(String, String)>,
    checks: Vec<String>,
    worktrees: Vec<String>,
}

impl Walk {
    fn starting_in(cwd: Option<&str>) -> Walk {
        let cwd = cwd
            .map(|d| d.trim().trim_end_matches('/'))
            .filter(|d| !d.is_empty() && *d != ".")
            .map(str::to_string);
        Walk {
            start: cwd.clone(),
            cwd,
            ..Walk::default()
        }
    }

    fn finish(self) -> ShellFacts {
        let final_cwd = self.cwd.filter(|c| Some(c) != self.start.as_ref());
        let mut facts = ShellFacts {
            reads: Vec::new(),
            modifies: Vec::new(),
            deletes: self.deletes,
            renames: self.renames,
            verification: (!self.checks.is_empty()).then(|| self.checks.join(" && ")),
            final_cwd,
            worktrees: self.worktrees,
        };
        for p in self.reads {
            if !facts.reads.contains(&p) {
                facts.reads.push(p);
            }
        }
        for p in self.modifies {
            if !facts.modifies.contains(&p) {
                facts.modifies.push(p);
            }
        }
        facts
    }

    fn join(&self, p: &str) -> String {
        match &self.cwd {
            Some(d) if !p.starts_with('/') && !p.starts_with('~') => {
                format!("{}/{}", d.trim_end_matches('/'), p)
            }
            _ => p.to_string(),
        }
    }

    fn read(&mut self, p: &str) {
        if looks_like_path(p) {
            let p = self.join(p);
            self.reads.push(p);
        }
    }

    fn modify(&mut self, p: &str) {
        if looks_like_path(p) {
            let p = self.join(p);
            self.modifies.push(p);
        }
    }

    fn delete(&mut self, p: &str) {
        if looks_like_path(p) {
            let p = self.join(p);
            self.modifies.push(p.clone());
            self.deletes.push(p);
        }
    }

    fn rename(&mut self, from: &str, to: &str) {
        if looks_like_path(from) && looks_like_path(to) {
            let (from, to) = (self.join(from), self.join(to));
            self.modifies.push(from.clone());
            self.modifies.push(to.clone());
            self.renames.push((from, to));
        }
    }

    fn patch(&mut self, patch: &str) {
        for p in patch_paths(patch) {
            self.modify(&p);
        }
    }

    fn list(&mut self, list: &ast::CompoundList) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        for c in &p.seq {
            self.command(c);
        }
    }

    fn command(&mut self, c: &ast::Command) {
        match c {
            ast::Command::Simple(s) => self.simple_ast(s),
            ast::Command::Compound(compound, redirects) => {
                if let Some(r) = redirects {
                    for r in &r.0 {
                        self.redirect(r);
                    }
                }
                self.compound(compound);
            }
            ast::Command::Function(f) => {
                let ast::FunctionBody(body, redirects) = &f.body;
                self.compound(body);
                if let Some(r) = redirects {
                    for r in &r.0 {
                        self.redirect(r);
                    }
                }
            }
            ast::Command::ExtendedTest(_, _) => {}
        }
    }

    fn compound(&mut self, c: &ast::CompoundCommand) {
        match c {
            ast::CompoundCommand::BraceGroup(b) => self.list(&b.list),
            ast::CompoundCommand::Subshell(s) => {
                // `(cd dir && …)` changes the directory of the subshell only.
                let cwd = self.cwd.clone();
                self.list(&s.list);
                self.cwd = cwd;
            }
            ast::CompoundCommand::ForClause(f) => self.list(&f.body.list),
            ast::CompoundCommand::ArithmeticForClause(f) => self.list(&f.body.list),
            ast::CompoundCommand::CaseClause(c) => {
                for item in &c.cases {
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        self.list(cond);
                    }
                    self.list(&e.body);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            ast::CompoundCommand::Coprocess(c) => self.command(&c.body),
            ast::CompoundCommand::Arithmetic(_) => {}
        }
    }

    fn simple_ast(&mut self, s: &ast::SimpleCommand) {
        let mut words: Vec<Word> = Vec::new();
        let mut redirects: Vec<&ast::IoRedirect> = Vec::new();
        // Prefix: assignments (`RUST_LOG=debug`) are no words; redirections may come first.
        for item in s.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => redirects.push(r),
                ast::CommandPrefixOrSuffixItem::Word(w) => words.push(Word::from_ast(w)),
                ast::CommandPrefixOrSuffixItem::AssignmentWord(_, _) => {}
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => self.list(&sub.list),
            }
        }
        if let Some(name) = &s.word_or_name {
            words.push(Word::from_ast(name));
        }
        for item in s.suffix.iter().flat_map(|p| p.0.iter()) {
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => redirects.push(r),
                ast::CommandPrefixOrSuffixItem::Word(w) => words.push(Word::from_ast(w)),
                // `declare X=1`, `export X=…`: arguments, not paths.
                ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    words.push(Word::from_ast(w))
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => self.list(&sub.list),
            }
        }
        let heredocs: Vec<&str> = redirects
            .iter()
            .filter_map(|r| match r {
                ast::IoRedirect::HereDocument(_, doc) => Some(doc.doc.value.as_str()),
                _ => None,
            })
            .collect();
        for r in &redirects {
            self.redirect(r);
        }
        self.simple(&words, &heredocs);
    }

    /// Redirections: `> f`, `>> f`, `&> f` write; `< f` reads; `2>&1` and heredocs are no file.
    fn redirect(&mut self, r: &ast::IoRedirect) {
        match r {
            ast::IoRedirect::File(_, kind, ast::IoFileRedirectTarget::Filename(w)) => {
                let w = Word::from_ast(w);
                let Some(p) = path_word(&w) else { return };
                match kind {
                    ast::IoFileRedirectKind::Read => self.read(p),
                    ast::IoFileRedirectKind::Write
                    | ast::IoFileRedirectKind::Append
                    | ast::IoFileRedirectKind::Clobber
                    | ast::IoFileRedirectKind::ReadAndWrite => self.modify(p),
                    ast::IoFileRedirectKind::DuplicateInput
                    | ast::IoFileRedirectKind::DuplicateOutput => {}
                }
            }
            ast::IoRedirect::File(_, _, ast::IoFileRedirectTarget::ProcessSubstitution(_, s)) => {
                self.list(&s.list)
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                let w = Word::from_ast(w);
                if let Some(p) = path_word(&w) {
                    self.modify(p);
                }
            }
            _ => {}
        }
    }

    /// One simple command, as words (command name first), with the bodies of its heredocs.
    fn simple(&mut self, words: &[Word], heredocs: &[&str]) {
        let w = strip_wrappers(words);
        let Some(cmd) = w.first() else { return };
        let args = &w[1..];
        let name = base_name(&cmd.text).to_string();
        match name.as_str() {
            "cd" | "pushd" => {
                if let Some(d) = args.iter().find(|a| !a.text.starts_with('-')) {
                    self.cwd = path_word(d).map(|d| self.join(d));
                }
            }
            shell if is_shell(shell) => {
                // `bash -lc SCRIPT` runs a script of its own: parse it the same way.
                if let Some(i) = args.iter().position(|a| is_command_flag(&a.text)) {
                    if let Some(script) = args.get(i + 1) {
                        let inner = analyze_shell(&script.text);
                        self.absorb(inner);
                    }
                }
            }
            "cat" | "nl" | "less" | "more" | "bat" | "wc" | "file" | "stat" | "xxd" | "hexdump"
            | "od" | "strings" | "md5sum" | "sha256sum" | "shasum" | "cmp" | "diff" => {
                for p in operands(args, &[]) {
                    self.read(p);
                }
            }
            "head" | "tail" => {
                for p in operands(args, &["-n", "-c", "--lines", "--bytes"]) {
                    if p.parse::<i64>().is_err() {
                        self.read(p);
                    }
                }
            }
            "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" => self.search(args),
            "sed" => self.sed(args),
            "awk" | "gawk" | "mawk" => {
                let has_program_file = args.iter().any(|a| a.is("-f"));
                let mut ops = operand_words(args, &["-F", "-v", "-f"]).into_iter();
                if !has_program_file {
                    ops.next(); // the program
                }
                for p in ops.filter_map(path_word).filter(|p| !p.contains('=')) {
                    self.read(p);
                }
            }
            "jq" => {
                let mut ops =
                    operand_words(args, &["--arg", "--argjson", "-f", "--indent"]).into_iter();
                ops.next(); // the filter
                for p in ops.filter_map(path_word) {
                    self.read(p);
                }
            }
            "mv" => {
                let ops = operands(args, &["-t", "--target-directory", "-S", "--suffix"]);
                match ops.as_slice() {
                    [from, to] if !args.iter().any(|a| a.is("-t")) => self.rename(from, to),
                    _ => {
                        for p in ops {
                            self.modify(p);
                        }
                    }
                }
            }
            "cp" | "install" => {
                let ops = operands(args, &["-t", "--target-directory", "-m", "-o", "-g", "-S"]);
                if let Some((dst, srcs)) = ops.split_last() {
                    for s in srcs {
                        self.read(s);
                    }
                    self.modify(dst);
                }
            }
            "rm" | "unlink" | "shred" => {
                for p in operands(args, &[]) {
                    self.delete(p);
                }
            }
            "touch" | "truncate" => {
                for p in operands(args, &["-s", "--size", "-r", "-d", "-t"]) {
                    if name != "touch" || !p.chars().all(|c| c.is_ascii_digit()) {
                        self.modify(p);
                    }
                }
            }
            "tee" => {
                for p in operands(args, &[]) {
                    self.modify(p);
                }
            }
            "apply_patch" | "applypatch" => {
                // Codex: `apply_patch <<'PATCH' … PATCH` or `apply_patch "$PATCH_TEXT"`.
                for doc in heredocs {
                    self.patch(doc);
                }
                for a in args.iter().filter(|a| a.literal) {
                    self.patch(&a.text);
                }
            }
            "patch" => {
                for doc in heredocs {
                    self.patch(doc);
                }
                let mut it = args.iter();
                while let Some(a) = it.next() {
                    if a.is("-i") || a.is("--input") {
                        if let Some(p) = it.next().and_then(path_word) {
                            self.read(p);
                        }
                    } else if let Some(p) = a.text.strip_prefix("--input=") {
                        self.read(p);
                    }
                }
            }
            "git" => self.git(args, heredocs),
            "prettier" | "black" | "gofmt" | "rustfmt" | "autopep8" | "isort" | "clang-format" => {
                self.formatter(&name, args)
            }
            "ruff" if args.first().is_some_and(|a| a.is("format")) => {
                self.formatter("ruff format", &args[1..])
            }
            "npx" | "pnpx" | "bunx" if args.first().is_some_and(|a| a.is("prettier")) => {
                self.formatter("prettier", &args[1..])
            }
            _ => {}
        }
        if let Some(check) = verification_of(w) {
            self.checks.push(check);
        }
    }

    fn absorb(&mut self, inner: ShellFacts) {
        for p in inner.reads {
            self.read(&p);
        }
        for p in inner.modifies {
            self.modify(&p);
        }
        for p in inner.deletes {
            self.deletes.push(self.join(&p));
        }
        for (from, to) in inner.renames {
            self.renames.push((self.join(&from), self.join(&to)));
        }
        for w in inner.worktrees {
            self.worktrees.push(self.join(&w));
        }
        if let Some(c) = inner.verification {
            self.checks.push(c);
        }
    }

    /// `grep [OPTS] PATTERN [PATH…]`, `rg …`: the pattern is not a path (unless given by
    /// `-e`/`-f`), and only operands that name files are reads (a folder is searched, not read).
    fn search(&mut self, args: &[Word]) {
        let with_value = [
            "-e",
            "-f",
            "-m",
            "-A",
            "-B",
            "-C",
            "-g",
            "-t",
            "-T",
            "--glob",
            "--type",
            "--type-not",
            "--max-count",
            "--context",
            "--after-context",
            "--before-context",
            "--regexp",
            "--file",
            "--include",
            "--exclude",
            "--exclude-dir",
            "-d",
            "-D",
            "--color",
            "--max-depth",
            "-M",
            "--max-columns",
            "--sort",
        ];
        let pattern_given = args.iter().any(|a| {
            a.is("-e")
                || a.is("-f")
                || a.text.starts_with("--regexp")
                || a.text.starts_with("--file=")
                || a.is("--files")
        });
        let mut ops = operand_words(args, &with_value).into_iter();
        if !pattern_given {
            ops.next(); // the pattern
        }
        for p in ops.filter_map(path_word).filter(|p| looks_like_file(p)) {
            self.read(p);
        }
    }

    /// `sed [-n] SCRIPT FILE…`, `sed -e S -e S FILE…`, `sed -i[SUFFIX] … FILE…`: the script is
    /// never a path; the files are read, or modified in place with `-i`.
    fn sed(&mut self, args: &[Word]) {
        // BSD sed: `sed -i '' SCRIPT FILE`, the empty word is the backup suffix, not the script.
        let args: Vec<Word> = args
            .iter()
            .enumerate()
            .filter(|(i, a)| !(a.text.is_empty() && *i > 0 && args[i - 1].is("-i")))
            .map(|(_, a)| a.clone())
            .collect();
        let args = args.as_slice();
        let in_place = args.iter().any(|a| {
            a.is("--in-place")
                || a.text.starts_with("--in-place=")
                || (a.text.starts_with("-i") && !a.text.starts_with("--"))
                || (a.text.starts_with('-')
                    && !a.text.starts_with("--")
                    && a.text.len() > 1
                    && a.text[1..].chars().all(|c| c.is_ascii_alphabetic())
                    && a.text.contains('i'))
        });
        let script_given = args.iter().any(|a| {
            a.is("-e") || a.is("-f") || a.is("--expression") || a.text.starts_with("--expression=")
        });
        let mut ops =
            operand_words(args, &["-e", "-f", "--expression", "--file", "-l"]).into_iter();
        if !script_given {
            ops.next(); // the script
        }
        for p in ops.filter_map(path_word) {
            if in_place {
                self.modify(p);
            } else {
                self.read(p);
            }
        }
        if let Some(i) = args.iter().position(|a| a.is("-f") || a.is("--file")) {
            if let Some(p) = args.get(i + 1).and_then(path_word) {
                self.read(p);
            }
        }
    }

    /// `git [-C DIR] SUBCOMMAND …`: paths of the subcommands that name files.
    fn git(&mut self, args: &[Word], heredocs: &[&str]) {
        let mut i = 0;
        let saved = self.cwd.clone();
        while i < args.len() {
            let a = &args[i].text;
            if a == "-C" {
                if let Some(d) = args.get(i + 1).and_then(path_word) {
                    self.cwd = Some(self.join(d));
                }
                i += 2;
            } else if a == "-c" || a == "--git-dir" || a == "--work-tree" {
                i += 2;
            } else if a.starts_with('-') {
                i += 1;
            } else {
                break;
            }
        }
        let Some(sub) = args.get(i) else {
            self.cwd = saved;
            return;
        };
        let rest = &args[i + 1..];
        // Paths after `--` are always paths; before it, operands that look like files (a
        // revision such as `HEAD~1` or `main` does not).
        let paths = |rest: &[Word]| -> Vec<String> {
            match rest.iter().position(|a| a.is("--")) {
                Some(dd) => rest[dd + 1..]
                    .iter()
                    .filter_map(path_word)
                    .map(str::to_string)
                    .collect(),
                None => operands(rest, &["-m", "-b", "-B", "-U", "--unified", "-n"])
                    .into_iter()
                    .filter(|p| looks_like_file(p) && !p.contains("..") && !p.contains(':'))
                    .map(str::to_string)
                    .collect(),
            }
        };
        match sub.text.as_str() {
            "diff" | "show" | "log" | "blame" | "cat-file" => {
                for p in paths(rest) {
                    self.read(&p);
                }
            }
            // Staging only: the files in the work tree stay as they are.
            "restore" | "rm" if rest.iter().any(|a| a.is("--staged") || a.is("--cached")) => {
                let work_tree_too = rest.iter().any(|a| a.is("--worktree") || a.is("-W"));
                for p in paths(rest).iter().filter(|_| work_tree_too) {
                    self.modify(p);
                }
            }
            "rm" => {
                for p in paths(rest) {
                    self.delete(&p);
                }
            }
            "mv" => match paths(rest).as_slice() {
                [from, to] => self.rename(from, to),
                more => {
                    for p in more {
                        self.modify(p);
                    }
                }
            },
            "checkout" | "restore" => {
                for p in paths(rest) {
                    self.modify(&p);
                }
            }
            "apply" | "am" => {
                for doc in heredocs {
                    self.patch(doc);
                }
                for p in operands(rest, &["-p", "-C", "--directory", "--exclude", "--include"]) {
                    self.read(p);
                }
            }
            "worktree" if rest.first().is_some_and(|a| a.is("add")) => {
                // `git worktree add [-b BRANCH] PATH [COMMIT]`: the path is the first operand.
                let with_value = ["-b", "-B", "--reason"];
                if let Some(dir) = operand_words(&rest[1..], &with_value)
                    .first()
                    .and_then(|w| path_word(w))
                {
                    let dir = self.join(dir);
                    self.worktrees.push(dir);
                }
            }
            // `git add`, `git commit`, `git stash`: the index and history change, not the files.
            _ => {}
        }
        self.cwd = saved;
    }

    /// A formatter rewrites the files it is given when told to write (`prettier --write`,
    /// `gofmt -w`; `black`, `rustfmt`, `ruff format` write by default). It verifies nothing.
    fn formatter(&mut self, name: &str, args: &[Word]) {
        let checks_only = args
            .iter()
            .any(|a| a.is("--check") || a.is("-c") || a.is("--diff") || a.is("-l") || a.is("-d"));
        let writes = match name {
            "prettier" => args.iter().any(|a| a.is("--write") || a.is("-w")),
            "gofmt" => args.iter().any(|a| a.is("-w")),
            "clang-format" => args.iter().any(|a| a.is("-i")),
            _ => !checks_only,
        };
        if writes && !checks_only {
            for p in operands(args, &["--config", "--line-length", "-l", "--ignore-path"]) {
                if looks_like_file(p) {
                    self.modify(p);
                }
            }
        }
    }
}

/// The literal operands of a command that are shaped like paths (see [`operand_words`]).
fn operands<'a>(args: &'a [Word], with_value: &[&str]) -> Vec<&'a str> {
    operand_words(args, with_value)
        .into_iter()
        .filter_map(path_word)
        .collect()
}

/// The operands of a command: arguments that are not options, skipping the value of each
/// option in `with_value`. After `--`, everything is an operand.
fn operand_words<'a>(args: &'a [Word], with_value: &[&str]) -> Vec<&'a Word> {
    let mut out = Vec::new();
    let mut it = args.iter();
    let mut options_done = false;
    while let Some(a) = it.next() {
        if !options_done {
            if a.is("--") {
                options_done = true;
                continue;
            }
            if with_value.contains(&a.text.as_str()) {
                it.next();
                continue;
            }
            if a.text.starts_with('-') && a.text.len() > 1 {
                continue;
            }
        }
        out.push(a);
    }
    out
}

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Drop leading env assignments and wrappers (`timeout 60`, `env`, `time`, `nice`, `sudo`).
fn strip_wrappers(words: &[Word]) -> &[Word] {
    let mut w = words;
    loop {
        match w.first().map(|x| x.text.as_str()) {
            Some(first) if is_assignment(first) => w = &w[1..],
            Some("env" | "time" | "nice" | "sudo" | "command" | "exec" | "nohup" | "xargs") => {
                w = &w[1..];
                while w.first().is_some_and(|x| x.text.starts_with('-')) {
                    w = &w[1..];
                }
            }
            Some("timeout" | "gtimeout") => {
                w = &w[1..];
                while w.first().is_some_and(|x| x.text.starts_with('-')) {
                    w = &w[1..];
                }
                if !w.is_empty() {
                    w = &w[1..]; // the duration
                }
            }
            _ => return w,
        }
    }
}

/// The verification a simple command runs, as its words joined (quotes removed), or `None`.
fn verification_of(words: &[Word]) -> Option<String> {
    let w: Vec<&str> = strip_wrappers(words)
        .iter()
        .map(|x| x.text.as_str())
        .collect();
    verification_kind(&w).then(|| w.join(" "))
}

/// Verification commands of every common ecosystem. Formatters that rewrite files
/// (`cargo fmt`, `prettier --write`, `black`, `gofmt -w`, `ruff format`) are not verification;
/// their check modes (`--check`) are.
fn verification_kind(w: &[&str]) -> bool {
    let tool = w.first().map(|t| base_name(t)).unwrap_or("");
    let sub = w.get(1).copied().unwrap_or("");
    let sub2 = w.get(2).copied().unwrap_or("");
    let has = |flag: &str| w.contains(&flag);
    let script_is_check = |s: &str| {
        let s = s.split(':').next().unwrap_or(s);
        matches!(
            s,
            "test"
                | "tests"
                | "build"
                | "lint"
                | "typecheck"
                | "type-check"
                | "check"
                | "tsc"
                | "e2e"
                | "ci"
                | "verify"
                | "publish"
        ) || matches!(s, "format" | "fmt") && w.iter().any(|x| x.ends_with(":check"))
    };
    match tool {
        "cargo" => {
            matches!(
                sub,
                "test" | "build" | "check" | "clippy" | "nextest" | "bench" | "b" | "t" | "c"
            ) || (sub == "fmt" && has("--check"))
        }
        "go" => matches!(sub, "test" | "build" | "vet"),
        // A `--dry-run` of the project's own command checks it without side effects.
        "npm" | "pnpm" | "yarn" | "bun" => {
            has("--dry-run")
                || script_is_check(sub)
                || (matches!(sub, "run" | "run-script" | "exec") && script_is_check(sub2))
                || (sub == "x" && is_js_checker(sub2, w))
        }
        "npx" | "pnpx" | "bunx" => {
            is_js_checker(sub, w) || runs_a_test_script(&w[1..]) || has("--dry-run")
        }
        // Installing the project itself (`pip install -e .`) builds it.
        "pip" | "pip3" => sub == "install" && (has(".") || has("-e") || has("--editable")),
        "deno" => matches!(sub, "test" | "check" | "lint"),
        "node" | "tsx" | "ts-node" | "bash" | "sh" => runs_a_test_script(w),
        "pytest" | "py.test" | "tox" | "nox" | "mypy" | "pyright" | "tsc" | "tsgo" | "jest"
        | "vitest" | "eslint" | "phpunit" | "rspec" | "ctest" | "shellcheck" | "golangci-lint" => {
            true
        }
        "biome" => sub != "format" || has("--check"),
        "prettier" | "black" | "isort" => has("--check") || has("-c"),
        "gofmt" => false,
        "ruff" => {
            matches!(sub, "check" | "")
                || (sub.starts_with('-') && sub != "--fix")
                || (sub == "format" && has("--check"))
        }
        "python" | "python3" | "uv" | "poetry" | "pipenv" | "hatch" => {
            runs_a_test_script(w)
                || (sub.ends_with("setup.py") && matches!(sub2, "build" | "build_ext" | "test"))
                || (sub == "-m"
                    && matches!(
                        sub2,
                        "pytest" | "unittest" | "mypy" | "tox" | "pyright" | "ruff"
                    )
                    && !(sub2 == "ruff" && w.get(3) == Some(&"format") && !has("--check")))
                || (matches!(sub, "run")
                    && matches!(sub2, "pytest" | "mypy" | "tox" | "ruff" | "pyright"))
                || (tool == "hatch" && sub == "test")
        }
        "make" | "gmake" | "just" | "ninja" => !matches!(sub, "fmt" | "format" | "clean"),
        // Task runners: `mise run test`, `mise test`, `task lint`, `nx test app`,
        // `turbo run build`, `bazel test //...`, `earthly +test`.
        "mise" | "rtx" => script_is_check(if matches!(sub, "run" | "r") {
            sub2
        } else {
            sub
        }),
        "task" | "go-task" => script_is_check(sub),
        "nx" => script_is_check(if sub == "run" {
            sub2.rsplit(':').next().unwrap_or(sub2)
        } else {
            sub
        }),
        "turbo" => script_is_check(if sub == "run" { sub2 } else { sub }),
        "bazel" | "bazelisk" => matches!(sub, "test" | "build"),
        "earthly" => script_is_check(sub.trim_start_matches('+')),
        "php" => sub == "artisan" && sub2 == "test",
        "composer" => script_is_check(sub) || (sub == "run" && script_is_check(sub2)),
        "mvn" | "mvnw" | "gradle" | "gradlew" => true,
        "dotnet" => matches!(sub, "test" | "build"),
        "swift" => matches!(sub, "test" | "build"),
        "mix" => matches!(sub, "test" | "compile"),
        "bundle" => sub == "exec" && matches!(sub2, "rspec" | "rake"),
        "rake" => matches!(sub, "test" | "spec" | ""),
        "cmake" => sub == "--build",
        "zig" => matches!(sub, "build" | "test"),
        "stack" | "cabal" => matches!(sub, "test" | "build"),
        _ => false,
    }
}

/// `node test-cli.js`, `python /tmp/test_fix.py`, `tsx src/cli.ts --help`: a throwaway test
/// script, or a smoke run of the project's own CLI, is a check of the work too.
fn runs_a_test_script(w: &[&str]) -> bool {
    let runner = w.first().map(|t| base_name(t)).unwrap_or("");
    let args = &w[1.min(w.len())..];
    let script = args
        .iter()
        .find(|a| !a.starts_with('-') && **a != "run" && **a != "tsx");
    let Some(script) = script else {
        return false;
    };
    let file = base_name(script).to_ascii_lowercase();
    let is_script = [".js", ".mjs", ".cjs", ".ts", ".mts", ".py", ".sh"]
        .iter()
        .any(|e| file.ends_with(e));
    let test_like = file.starts_with("test") || file.contains("_test") || file.contains(".test.");
    let smoke = args.iter().any(|a| *a == "--help" || *a == "--version");
    is_script
        && (test_like || smoke)
        && matches!(
            runner,
            "node"
                | "tsx"
                | "ts-node"
                | "bash"
                | "sh"
                | "python"
                | "python3"
                | "npx"
                | "bunx"
                | "pnpx"
        )
}

fn is_js_checker(s: &str, w: &[&str]) -> bool {
    match s {
        "jest" | "vitest" | "tsc" | "tsgo" | "eslint" | "mocha" | "playwright" => true,
        "biome" => w.get(2) != Some(&"format") || w.contains(&"--check"),
        "prettier" => w.contains(&"--check") || w.contains(&"-c"),
        _ => false,
    }
}

/// Paths a patch touches: `apply_patch` headers and unified-diff `+++ b/path` lines.
pub fn patch_paths(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: &str| {
        let p = p.trim();
        if !p.is_empty() && p != "/dev/null" && !out.iter().any(|o| o == p) {
            out.push(p.to_string());
        }
    };
    for line in patch.lines() {
        for prefix in [
            "*** Update File: ",
            "*** Add File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ] {
            if let Some(p) = line.strip_prefix(prefix) {
                push(p);
            }
        }
        if let Some(p) = line.strip_prefix("+++ ") {
            let p = p.split('\t').next().unwrap_or(p);
            push(p.strip_prefix("b/").unwrap_or(p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shell(line: &str) -> ShellFacts {
        analyze_shell(line)
    }

    #[test]
    fn apply_patch_headers_and_diffs() {
        let p = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/b.rs\n+new\n*** Delete File: old.rs\n*** End Patch";
        assert_eq!(patch_paths(p), ["src/a.rs", "src/b.rs", "old.rs"]);
        let d = "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(patch_paths(d), ["src/x.py"]);
    }

    #[test]
    fn a_line_run_in_a_folder_takes_its_paths_from_there_and_says_where_it_left_the_shell() {
        let facts = analyze_shell_in(
            "cat src/a.rs && cd ../b && sed -i s/x/y/ c.rs",
            Some("/w/a"),
        );
        assert_eq!(facts.reads, ["/w/a/src/a.rs"]);
        assert_eq!(facts.modifies, ["/w/a/../b/c.rs"]);
        assert_eq!(facts.final_cwd.as_deref(), Some("/w/a/../b"));
        // A subshell's `cd` leaves the shell where it was.
        let facts = analyze_shell_in("(cd pkg && cat x.ts)", Some("/w"));
        assert_eq!(facts.reads, ["/w/pkg/x.ts"]);
        assert_eq!(facts.final_cwd, None);
        let facts = analyze_shell("cd pkg");
        assert_eq!(facts.final_cwd.as_deref(), Some("pkg"));
        let facts = analyze_command_value_in(&json!(["cat", "x.rs"]), Some("/w/sub")).unwrap();
        assert_eq!(facts.reads, ["/w/sub/x.rs"]);
    }

    #[test]
    fn a_worktree_the_line_adds_is_named() {
        let facts = shell("git worktree add -b fix ../repo.worktrees/fix main");
        assert_eq!(facts.worktrees, ["../repo.worktrees/fix"]);
        let facts = analyze_shell_in("git -C repo worktree add /abs/wt", Some("/w"));
        assert_eq!(facts.worktrees, ["/abs/wt"]);
        assert!(shell("git worktree list").worktrees.is_empty());
    }

    #[test]
    fn reads_from_common_viewers() {
        assert_eq!(shell("cat src/a.rs").reads, ["src/a.rs"]);
        assert_eq!(shell("head -n 40 src/a.rs").reads, ["src/a.rs"]);
        assert_eq!(shell("tail -20 log.txt").reads, ["log.txt"]);
        assert_eq!(shell("sed -n '1,80p' src/lib.rs").reads, ["src/lib.rs"]);
        assert_eq!(
            shell("nl -ba src/main.rs | sed -n '10,20p'").reads,
            ["src/main.rs"]
        );
        assert_eq!(shell("less README.md").reads, ["README.md"]);
        assert_eq!(shell("cd pkg && cat index.ts").reads, ["pkg/index.ts"]);
    }

    #[test]
    fn deletions_renames_and_staging() {
        let rm = shell("rm out.html && git rm -q old.rs");
        assert_eq!(rm.deletes, ["out.html", "old.rs"]);
        let mv = shell("git mv src/a.rs src/b.rs");
        assert_eq!(
            mv.renames,
            [("src/a.rs".to_string(), "src/b.rs".to_string())]
        );
        assert_eq!(
            shell("mv notes.md docs/notes.md").renames,
            [("notes.md".to_string(), "docs/notes.md".to_string())]
        );
        for staging in [
            "git restore --staged src/a.rs",
            "git rm --cached secrets.env",
            "git add src/a.rs",
            "git reset HEAD src/a.rs",
        ] {
            assert!(shell(staging).modifies.is_empty(), "{staging}");
        }
    }

    #[test]
    fn task_runners_are_checks() {
        for check in [
            "mise run test",
            "mise run lint",
            "mise test",
            "task test",
            "just test",
            "make check",
            "nx test web",
            "turbo run build",
            "bazel test //...",
            "pnpm run typecheck",
            "bun run test",
            "deno test",
            "gradle test",
            "mvn verify",
            "dotnet test",
            "rake test",
            "tox -e py312",
            "nox -s tests",
        ] {
            assert!(shell(check).verification.is_some(), "{check}");
        }
        for ad_hoc in [
            "node /tmp/test-cmd.js",
            "python3 test_fix.py",
            "npx tsx packages/coding-agent/src/cli.ts --help",
            "python setup.py build_ext --inplace",
            "npx tsgo -p tsconfig.build.json",
        ] {
            assert!(shell(ad_hoc).verification.is_some(), "{ad_hoc}");
        }
        for not_check in [
            "mise install",
            "task --list",
            "mise run dev",
            "node server.js",
            "python manage.py runserver",
        ] {
            assert!(shell(not_check).verification.is_none(), "{not_check}");
        }
    }

    #[test]
    fn modifications_from_shell() {
        assert_eq!(shell("sed -i 's/a/b/' src/a.rs").modifies, ["src/a.rs"]);
        assert_eq!(shell("mv old.rs new.rs").modifies, ["old.rs", "new.rs"]);
        assert_eq!(shell("cp a.txt b.txt").modifies, ["b.txt"]);
        assert_eq!(shell("rm -f build.log").modifies, ["build.log"]);
        assert_eq!(shell("touch NOTES.md").modifies, ["NOTES.md"]);
        assert_eq!(shell("echo hi > out.txt").modifies, ["out.txt"]);
        assert_eq!(shell("echo hi >> out.txt").modifies, ["out.txt"]);
        assert_eq!(
            shell("printf x | tee a.txt b.txt").modifies,
            ["a.txt", "b.txt"]
        );
        assert_eq!(
            shell("cargo test 2>&1 > /dev/null").modifies,
            Vec::<String>::new()
        );
        assert_eq!(
            shell("cat <<'EOF' > conf.toml\nx = 1\nEOF").modifies,
            ["conf.toml"]
        );
    }

    #[test]
    fn a_dry_run_an_editable_install_and_a_publish_are_checks() {
        for line in [
            "bun agentv eval examples/or.yaml --dry-run",
            "npx some-cli deploy --dry-run",
            "pip install -e .",
            "pip3 install --editable packages/core",
            "npm run publish",
            "npm publish --access public",
        ] {
            assert_eq!(shell(line).verification.as_deref(), Some(line), "{line}");
        }
        for line in ["pip install requests", "npm install", "bun install"] {
            assert_eq!(shell(line).verification, None, "{line}");
        }
    }

    #[test]
    fn verification_commands_of_common_ecosystems() {
        for (line, expect) in [
            ("cargo test", "cargo test"),
            (
                "cargo clippy --all-targets -- -D warnings",
                "cargo clippy --all-targets -- -D warnings",
            ),
            (
                "cd /repo && RUST_LOG=debug timeout 600 cargo test -p core",
                "cargo test -p core",
            ),
            ("go test ./...", "go test ./..."),
            ("go vet ./...", "go vet ./..."),
            ("npm test", "npm test"),
            ("pnpm run lint", "pnpm run lint"),
            ("yarn typecheck", "yarn typecheck"),
            ("bun test", "bun test"),
            ("npx vitest run", "npx vitest run"),
            ("pytest -x tests/test_a.py", "pytest -x tests/test_a.py"),
            ("python -m pytest -q", "python -m pytest -q"),
            ("tox -e py311", "tox -e py311"),
            ("tsc --noEmit", "tsc --noEmit"),
            ("ruff check .", "ruff check ."),
            ("mypy src", "mypy src"),
            ("make test", "make test"),
            ("mvn -q test", "mvn -q test"),
            ("./gradlew build", "./gradlew build"),
            ("dotnet test", "dotnet test"),
            ("cargo test 2>&1 | tail -20", "cargo test"),
        ] {
            assert_eq!(shell(line).verification.as_deref(), Some(expect), "{line}");
        }
        for line in [
            "ls -la",
            "git status",
            "cat Cargo.toml",
            "npm install",
            "cargo add serde",
            "grep -rn test src",
        ] {
            assert_eq!(shell(line).verification, None, "{line}");
        }
    }

    #[test]
    fn argv_commands_are_words_and_bash_scripts_inside_are_parsed() {
        let facts =
            analyze_command_value(&json!(["bash", "-lc", "cd pkg && cargo test"])).expect("facts");
        assert_eq!(facts.verification.as_deref(), Some("cargo test"));
        let facts = analyze_command_value(&json!(["cat", "a b.txt"])).expect("facts");
        assert_eq!(facts.reads, ["a b.txt"], "an argv word is never re-split");
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-({\n+  )?.description\n*** End Patch\n";
        let facts = analyze_command_value(&json!(["apply_patch", patch])).expect("facts");
        assert_eq!(facts.modifies, ["src/a.rs"]);
        assert!(facts.reads.is_empty());
    }

    #[test]
    fn a_patch_in_a_heredoc_is_a_patch_not_commands() {
        let line = "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: src/app.ts\n@@\n-const x = ({\n+  a)?.description\n+}\n*** Add File: src/new.ts\n+export {}\n*** End Patch\nPATCH";
        let facts = shell(line);
        assert_eq!(facts.modifies, ["src/app.ts", "src/new.ts"]);
        assert!(facts.reads.is_empty(), "{:?}", facts.reads);
        let line = "cd /repo && git apply <<'EOF'\n--- a/lib/x.py\n+++ b/lib/x.py\n@@ -1 +1 @@\n-a\n+b\nEOF";
        assert_eq!(shell(line).modifies, ["/repo/lib/x.py"]);
        let line = "patch -p1 <<EOF\n--- a/m.c\n+++ b/m.c\n@@ -1 +1 @@\n-}\n+{\nEOF";
        assert_eq!(shell(line).modifies, ["m.c"]);
    }

    #[test]
    fn a_heredoc_written_to_a_file_modifies_only_that_file() {
        let line = "cat > src/conf.ts <<'EOF'\nexport const x = {\n  y: 1,\n};\nrm -rf /\nEOF\ncat src/conf.ts";
        let facts = shell(line);
        assert_eq!(facts.modifies, ["src/conf.ts"]);
        assert_eq!(facts.reads, ["src/conf.ts"]);
        let line = "python3 - <<'PY'\nopen('out.txt','w').write('x')\nprint(1)\nPY";
        let facts = shell(line);
        assert!(
            facts.modifies.is_empty() && facts.reads.is_empty(),
            "{facts:?}"
        );
    }

    #[test]
    fn redirections_and_descriptors_are_not_files() {
        let facts = shell("cargo test 2>&1 | tee /tmp/test.log");
        assert_eq!(facts.modifies, ["/tmp/test.log"]);
        assert!(facts.reads.is_empty(), "{:?}", facts.reads);
        let facts = shell("npm test > out.log 2>&1 < /dev/null");
        assert_eq!(facts.modifies, ["out.log"]);
        assert!(facts.reads.is_empty());
        assert_eq!(shell("make &> build.log").modifies, ["build.log"]);
        assert_eq!(shell("wc -l < data.csv").reads, ["data.csv"]);
    }

    #[test]
    fn a_sed_script_is_never_a_path() {
        let facts = shell("sed -i 's/{/(/g; s|a/b|c/d|' src/x.rs src/y.rs");
        assert_eq!(facts.modifies, ["src/x.rs", "src/y.rs"]);
        let facts = shell("sed -n -e '/fn main/,/^}/p' -e 's/x/y/' src/main.rs");
        assert_eq!(facts.reads, ["src/main.rs"]);
        assert!(facts.modifies.is_empty());
        assert_eq!(shell("sed -i.bak -e 's/a/b/' f.txt").modifies, ["f.txt"]);
        assert_eq!(shell("sed -ni 's/a/b/p' f.txt").modifies, ["f.txt"]);
        assert_eq!(
            shell("sed -i '' 's/new M(\\(.*\\), 0)/new M(\\1)/g' test/md.test.ts").modifies,
            ["test/md.test.ts"],
            "BSD sed's empty backup suffix"
        );
        assert!(shell("echo x | sed 's/x/y/'").reads.is_empty());
    }

    #[test]
    fn search_tools_read_the_files_they_name_not_the_pattern_or_folders() {
        let facts = shell("rg -n \"fn main\" src/main.rs src");
        assert_eq!(facts.reads, ["src/main.rs"]);
        let facts = shell("grep -rn --include='*.ts' TODO packages/core README.md");
        assert_eq!(facts.reads, ["README.md"]);
        let facts = shell("grep -e foo -e bar Cargo.toml");
        assert_eq!(facts.reads, ["Cargo.toml"]);
        assert!(shell("rg -l 'impl\\s+Foo' .").reads.is_empty());
    }

    #[test]
    fn git_subcommands_name_their_paths() {
        assert_eq!(
            shell("git diff -- src/a.rs src/b.rs").reads,
            ["src/a.rs", "src/b.rs"]
        );
        assert_eq!(shell("git diff HEAD~1 src/a.rs").reads, ["src/a.rs"]);
        assert_eq!(
            shell("git -C pkg show HEAD:lib.rs").reads,
            Vec::<String>::new()
        );
        assert_eq!(shell("git checkout -- src/a.rs").modifies, ["src/a.rs"]);
        assert_eq!(
            shell("git -C pkg restore index.ts").modifies,
            ["pkg/index.ts"]
        );
        let facts = shell("git add src/a.rs && git commit -m 'fix: x > y'");
        assert!(
            facts.reads.is_empty() && facts.modifies.is_empty(),
            "{facts:?}"
        );
    }

    #[test]
    fn expanded_words_and_globs_are_not_paths() {
        let facts = shell("cat $FILE \"$(git rev-parse --show-toplevel)/x\" src/*.rs ~/notes.md");
        assert_eq!(facts.reads, ["~/notes.md"]);
        assert!(shell("for f in *.rs; do wc -l \"$f\"; done")
            .reads
            .is_empty());
        assert_eq!(
            shell("for f in a.rs b.rs; do cat lib.rs; done").reads,
            ["lib.rs"]
        );
    }

    #[test]
    fn subshells_and_nested_scripts_are_walked() {
        let facts = shell("(cd web && npm test) && cat README.md");
        assert_eq!(facts.verification.as_deref(), Some("npm test"));
        assert_eq!(
            facts.reads,
            ["README.md"],
            "the subshell's cd does not leak"
        );
        let facts = shell("bash -c 'cat src/lib.rs && cargo check'");
        assert_eq!(facts.reads, ["src/lib.rs"]);
        assert_eq!(facts.verification.as_deref(), Some("cargo check"));
        let facts = shell("if [ -f x.toml ]; then cat x.toml; else touch x.toml; fi");
        assert_eq!(facts.reads, ["x.toml"]);
        assert_eq!(facts.modifies, ["x.toml"]);
    }

    #[test]
    fn formatters_are_not_verification_but_their_check_modes_are() {
        for line in [
            "cargo fmt",
            "cargo fmt --all",
            "prettier --write src/a.ts",
            "npx prettier --write .",
            "black src",
            "gofmt -w main.go",
            "ruff format src",
            "python -m ruff format .",
            "make fmt",
        ] {
            assert_eq!(shell(line).verification, None, "{line}");
        }
        for line in [
            "cargo fmt --check",
            "prettier --check .",
            "npx prettier --check src",
            "black --check .",
            "ruff format --check",
        ] {
            assert_eq!(shell(line).verification.as_deref(), Some(line), "{line}");
        }
        assert_eq!(shell("prettier --write src/a.ts").modifies, ["src/a.ts"]);
        assert_eq!(shell("gofmt -w main.go").modifies, ["main.go"]);
        assert!(shell("gofmt -l main.go").modifies.is_empty());
    }

    #[test]
    fn an_unparsable_line_yields_no_paths() {
        let facts = shell("cat 'unterminated src/a.rs");
        assert!(facts.reads.is_empty() && facts.modifies.is_empty());
        assert_eq!(
            shell("cargo test --all").verification.as_deref(),
            Some("cargo test --all")
        );
    }
}
