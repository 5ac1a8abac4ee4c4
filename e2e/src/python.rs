//! Python for the tests that prove Weft with clients in another language: a virtualenv
//! under the cargo target directory with one pinned package from PyPI, created once and
//! reused while it holds that version. The interpreter is `WEFT_TEST_PYTHON`, else
//! `python3.11`, else `python3`.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::process::bin_dir;

/// `target/<dir>` holding `package==version` (created, or reused when it has it); returns
/// its interpreter. Fails saying why (no Python, no venv module, PyPI unreachable).
pub fn venv(dir: &str, package: &str, version: &str) -> anyhow::Result<PathBuf> {
    let target = bin_dir()?
        .parent()
        .context("the binaries' directory has no parent")?
        .to_path_buf();
    let venv = target.join(dir);
    let python = venv.join("bin").join("python");
    let probe = format!("import importlib.metadata as m; print(m.version('{package}'))");
    let installed = std::process::Command::new(&python)
        .args(["-c", &probe])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == version);
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
        .arg(format!("{package}=={version}"))
        .output()
        .context("running pip")?;
    anyhow::ensure!(
        pip.status.success(),
        "pip install {package}=={version} failed (is PyPI reachable?):\n{}{}",
        String::from_utf8_lossy(&pip.stdout),
        String::from_utf8_lossy(&pip.stderr)
    );
    Ok(python)
}
