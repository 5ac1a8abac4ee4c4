//! Python for the tests that prove Weft with clients in another language: a virtualenv
//! under the cargo target directory with pinned packages from PyPI, created once and
//! reused while it holds those versions. The interpreter is `WEFT_TEST_PYTHON`, else
//! `python3.11`, else `python3`.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::process::bin_dir;

/// `target/<dir>` holding `package==version` (created, or reused when it has it); returns
/// its interpreter. Fails saying why (no Python, no venv module, PyPI unreachable).
pub fn venv(dir: &str, package: &str, version: &str) -> anyhow::Result<PathBuf> {
    venv_with(dir, &[(package, version)])
}

/// `target/<dir>` holding each `(package, version)`; see [`venv`].
pub fn venv_with(dir: &str, packages: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let target = bin_dir()?
        .parent()
        .context("the binaries' directory has no parent")?
        .to_path_buf();
    let venv = target.join(dir);
    // Tests run in parallel (threads of one binary, and several binaries): one creates
    // the venv while the others wait for it, rather than all clearing it at once.
    let lock_path = target.join(format!("{dir}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    let python = venv.join("bin").join("python");
    let names: Vec<String> = packages.iter().map(|(p, _)| format!("'{p}'")).collect();
    let probe = format!(
        "import importlib.metadata as m; print(' '.join(m.version(p) for p in [{}]))",
        names.join(", ")
    );
    let wanted: Vec<&str> = packages.iter().map(|(_, v)| *v).collect();
    let installed = std::process::Command::new(&python)
        .args(["-c", &probe])
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == wanted.join(" ")
        });
    if installed {
        return Ok(python);
    }
    let candidates: Vec<String> = match std::env::var("WEFT_TEST_PYTHON") {
        Ok(p) => vec![p],
        Err(_) => vec!["python3.11".into(), "python3".into()],
    };
    let base = candidates
        .iter()
        .find(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .with_context(|| format!("no Python interpreter among {candidates:?}"))?;
    let created = std::process::Command::new(base)
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .with_context(|| format!("running {base} -m venv"))?;
    anyhow::ensure!(
        created.success(),
        "{base} -m venv {} failed (is the venv module installed?)",
        venv.display()
    );
    let pip = std::process::Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages.iter().map(|(p, v)| format!("{p}=={v}")))
        .output()
        .context("running pip")?;
    anyhow::ensure!(
        pip.status.success(),
        "pip install {packages:?} failed (is PyPI reachable?):\n{}{}",
        String::from_utf8_lossy(&pip.stdout),
        String::from_utf8_lossy(&pip.stderr)
    );
    Ok(python)
}

/// Runs `script` with `python` and `envs` (plus unbuffered output) to its end, within
/// `limit`; its output whatever its exit status.
pub async fn run_script(
    python: &std::path::Path,
    script: &std::path::Path,
    envs: &[(&str, &str)],
    limit: std::time::Duration,
) -> anyhow::Result<std::process::Output> {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(script)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (key, value) in envs {
        command.env(key, value);
    }
    tokio::time::timeout(limit, command.output())
        .await
        .with_context(|| format!("{} did not finish in {limit:?}", script.display()))?
        .with_context(|| format!("running {}", script.display()))
}

/// Panics unless a check script exited 0 and printed `all checks passed`; the message
/// holds its output and `context` (e.g. the suite's processes and logs).
pub fn assert_checks_passed(what: &str, output: &std::process::Output, context: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{what} failed ({}):\n{stdout}\n{stderr}\n{context}",
        output.status,
    );
}
