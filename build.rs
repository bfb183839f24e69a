//! Names the commit the binary is built from, for `hvd-cluster --version`: the short id of
//! git's HEAD, or "unknown" outside a git checkout (a copy without `.git`, a crate tarball).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=HVD_CLUSTER_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Built again when HEAD moves: a new commit, a checkout, a fetch that packs the refs.
    // (Only files that exist: cargo runs a script again every time for a missing one.)
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let mut watched = vec![format!("{dir}/HEAD"), format!("{dir}/packed-refs")];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(format!("{dir}/{branch}"));
        }
        for path in watched.iter().filter(|p| Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
