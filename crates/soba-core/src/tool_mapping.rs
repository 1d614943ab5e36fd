//! Which of an agent's tools read files, write files, run shell commands or apply patches.
//! Configuration names it (`toolMapping`); the capsule's artifact collector reads tool calls
//! with it.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which tools read files, write files, run shell commands or apply patches, and which
/// argument holds the path or command. Names compare case-sensitively.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolMapping {
    /// Tool name → argument holding the path it reads.
    pub read: HashMap<String, String>,
    /// Tool name → argument holding the path it writes.
    pub write: HashMap<String, String>,
    /// Tool name → argument holding the shell command (a string or an argv array).
    pub shell: HashMap<String, String>,
    /// Tool name → argument holding a patch in `apply_patch` or unified-diff form
    /// (empty string: the whole input is the patch).
    pub patch: HashMap<String, String>,
}

impl Default for ToolMapping {
    fn default() -> Self {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        ToolMapping {
            // Claude Code, pi, and common MCP file servers.
            read: map(&[
                ("Read", "file_path"),
                ("NotebookRead", "notebook_path"),
                ("read", "path"),
                ("read_file", "path"),
                ("view", "path"),
            ]),
            write: map(&[
                ("Edit", "file_path"),
                ("MultiEdit", "file_path"),
                ("Write", "file_path"),
                ("NotebookEdit", "notebook_path"),
                ("edit", "path"),
                ("write", "path"),
                ("write_file", "path"),
                ("edit_file", "path"),
                ("create", "path"),
            ]),
            // Claude Code Bash, pi bash, Codex shell / exec_command, OpenAI-chat agents' bash.
            shell: map(&[
                ("Bash", "command"),
                ("bash", "command"),
                ("shell", "command"),
                ("exec_command", "cmd"),
                ("local_shell", "command"),
            ]),
            // Codex apply_patch (custom tool: the input is the patch text).
            patch: map(&[("apply_patch", "input")]),
        }
    }
}
