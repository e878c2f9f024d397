//! The README's commands install only what they need: `bash .ci/serve` fetches the model
//! (`.ci/setup`) and never the test-only tools (`.ci/setup-tests`: apt packages, Go, npm),
//! which need root.
//!
//! The scripts run with a PATH of their own: the few ordinary tools they may use, and shims
//! of the installers and of `cargo` that write their arguments to a log (the installers'
//! shims then fail, as they would without root).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Commands serving must not need: each shim records its call and fails.
const INSTALLERS: &[&str] = &["apt-get", "apt", "npm", "go", "sudo", "id", "pip", "pip3"];

/// The ordinary tools the model's set-up uses when the model is already in place.
const TOOLS: &[&str] = &["bash", "dirname", "cut", "sha256sum"];

fn on_path(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on the PATH"))
}

fn shim(dir: &Path, name: &str, exit: u8) {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho \"{name} $*\" >> \"$SHIM_LOG\"\nexit {exit}\n"),
    )
    .expect("write a shim");
    let mut perms = std::fs::metadata(&path)
        .expect("shim metadata")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("make the shim executable");
}

#[test]
fn serve_sets_up_the_model_only_and_needs_no_root() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    for tool in TOOLS {
        std::os::unix::fs::symlink(on_path(tool), bin.join(tool)).expect("link a tool");
    }
    for installer in INSTALLERS {
        shim(&bin, installer, 1);
    }
    // `.ci/serve` ends by running the service through cargo; the shim stands in for it.
    shim(&bin, "cargo", 0);
    let log = tmp.path().join("calls.log");

    let out = Command::new(on_path("bash"))
        .arg(repo.join(".ci/serve"))
        .arg("--help")
        .current_dir(tmp.path())
        .env("PATH", &bin)
        .env("SHIM_LOG", &log)
        .output()
        .expect("run bash .ci/serve");

    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "bash .ci/serve failed ({}); calls:\n{calls}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(calls, "cargo run --release -- serve --help\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[setup] model already present and verified"),
        "{stdout}"
    );
}
