//! The README's first screen: the two set-up commands, and the line that installs `soba` where
//! the editors look for it, with a working command and a link to the editors' install steps.

use std::path::Path;
use std::process::Command;

const INSTALL: &str = "cargo install --path . --locked";

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The first screen: what a terminal of 40 lines shows.
fn first_screen(text: &str) -> String {
    text.lines().take(40).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_first_screen_keeps_two_set_up_commands_and_says_how_to_install_for_the_editors() {
    let text = readme();
    let screen = first_screen(&text);
    let block = screen
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a shell block on the first screen");
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        ["cargo run --release -- demo", "./scripts/test"],
        "the two set-up commands, and only them"
    );
    let after = screen
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split_once("```")
        .unwrap()
        .1;
    let line = after
        .split("\n\n")
        .find(|p| p.contains(INSTALL))
        .unwrap_or_else(|| panic!("`{INSTALL}` below the set-up commands:\n{screen}"));
    assert!(line.contains("~/.cargo/bin"), "{line}");
    assert!(
        line.contains("](editors/README.md)"),
        "the editors' install steps are one click away: {line}"
    );
    let editors = Path::new(env!("CARGO_MANIFEST_DIR")).join("editors/README.md");
    assert!(std::fs::read_to_string(editors)
        .unwrap()
        .contains("code --install-extension"));
}

#[test]
fn the_install_command_installs_the_soba_binary_where_both_editors_find_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `--locked` holds only while Cargo.lock matches Cargo.toml; `cargo metadata --locked`
    // fails exactly when `cargo install --locked` would.
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--locked",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| Path::new(p["manifest_path"].as_str().unwrap()) == root.join("Cargo.toml"))
        .expect("the package at the repository root, which `--path .` installs");
    let bins: Vec<&str> = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(bins, ["soba"], "`cargo install --path .` installs `soba`");
    // Where cargo puts it: the VS Code extension looks in ~/.cargo/bin; Neovim runs `soba` from
    // PATH, which cargo's installer sets up to include it.
    let vscode = std::fs::read_to_string(root.join("editors/vscode/src/settings.ts")).unwrap();
    assert!(
        vscode.contains("'.cargo/bin/soba'"),
        "the VS Code extension looks in ~/.cargo/bin"
    );
    let nvim = std::fs::read_to_string(root.join("editors/nvim/lua/soba/init.lua")).unwrap();
    assert!(
        nvim.contains("cmd = { 'soba', 'serve' }"),
        "Neovim starts `soba` from PATH"
    );
}
