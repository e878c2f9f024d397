//! The Python SDK (clients/python): its wheel is built and installed into the tests' venv,
//! and its pytest suite runs against this build's binary (and a witness of it), importing
//! the installed wheel, not the source tree.

use std::path::Path;
use std::process::Command;

use crate::common::{bin, test_python};

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

#[test]
fn the_python_sdk_passes_its_tests_against_this_binary() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = test_python();
    let wheels = tempfile::tempdir().expect("tempdir");
    run(
        Command::new(&python)
            .args(["-m", "pip", "wheel", "--no-deps", "--no-build-isolation"])
            .args(["--disable-pip-version-check", "-q", "-w"])
            .arg(wheels.path())
            .arg(repo.join("clients/python")),
        "building the SDK's wheel",
    );
    let wheel = std::fs::read_dir(wheels.path())
        .expect("the wheel dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("pip wrote a wheel");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--no-deps", "--no-index"])
            .args(["--force-reinstall", "--disable-pip-version-check", "-q"])
            .arg(&wheel),
        "installing the SDK's wheel",
    );
    let out = run(
        Command::new(&python)
            .args([
                "-m",
                "pytest",
                "clients/python/tests",
                "-q",
                "-p",
                "no:cacheprovider",
            ])
            .current_dir(repo)
            .env("AUDITMEM_BIN", bin())
            .env("AUDITMEM_SDK_FROM_WHEEL", "1"),
        "the SDK's pytest suite",
    );
    assert!(out.contains(" passed"), "{out}");
    assert!(!out.contains("skipped"), "{out}");
}
