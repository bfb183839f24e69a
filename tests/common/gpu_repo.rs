//! The stand-in for NVIDIA's container toolkit repository (tests/gpu_runtime.rs, and the GPU
//! stage of tests/cloud_vms.rs): two ed25519 keys, a stand-in `nvidia-container-toolkit`
//! package whose `nvidia-ctk` only records its arguments, and a flat apt repository signed by
//! each key, made in a container of Debian 12 (built here from scripts/build-images' base).
//! Nothing here reaches NVIDIA.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BASE: &str = "hvd-cluster/debian:bookworm";
pub const IMAGE: &str = "hvd-cluster/gpu-test:bookworm";
pub const DOCKERFILE: &str = "FROM hvd-cluster/debian:bookworm
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      curl gnupg ca-certificates python3 apt-utils \\
 && rm -rf /var/lib/apt/lists/*
";
/// The stand-in server's port, on each container's own loopback.
pub const PORT: u16 = 8780;

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("docker")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The test image, built again when the Dockerfile or the base image changed.
pub fn ensure_image(root: &Path) {
    if !docker(&["image", "inspect", BASE]).status.success() {
        let out = Command::new(root.join("scripts/build-images"))
            .arg("base")
            .output()
            .expect("scripts/build-images");
        assert!(
            out.status.success(),
            "scripts/build-images base: {}",
            text(&out.stderr)
        );
    }
    let base_id = text(&docker(&["image", "inspect", "-f", "{{.Id}}", BASE]).stdout);
    let inputs = format!("{}|{DOCKERFILE}", base_id.trim());
    let label = format!("{:016x}", fnv1a(inputs.as_bytes()));
    let have = docker(&[
        "image",
        "inspect",
        "-f",
        "{{ index .Config.Labels \"hvd-cluster.inputs\" }}",
        IMAGE,
    ]);
    if have.status.success() && text(&have.stdout).trim() == label {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("Dockerfile"), DOCKERFILE).expect("Dockerfile");
    let label_arg = format!("hvd-cluster.inputs={label}");
    let path = dir.path().to_string_lossy().into_owned();
    let out = docker(&["build", "-q", "--label", &label_arg, "-t", IMAGE, &path]);
    assert!(out.status.success(), "docker build: {}", text(&out.stderr));
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// `script` in a fresh container without network, `work` on /w.
pub fn run(work: &Path, script: &str) -> Output {
    let mount = format!("{}:/w", work.display());
    docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        &mount,
        IMAGE,
        "bash",
        "-c",
        script,
    ])
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Two keys (ed25519), the stand-in toolkit package, and the stand-in repository: under
/// /w/good signed by the good key (which /w/good/gpgkey serves), under /w/bad the same
/// repository signed by the other key (served as /w/bad/gpgkey).
pub const FIXTURES: &str = r#"set -eu
export GNUPGHOME=$(mktemp -d)
for who in good bad; do
  gpg --batch --quiet --passphrase '' --quick-gen-key "Stand-in $who <$who@test.invalid>" ed25519 sign never
done
fpr() { gpg --with-colons --list-keys "$1@test.invalid" | awk -F: '$1 == "fpr" { print $10; exit }'; }
arch=$(dpkg --print-architecture)
pkg=$(mktemp -d)
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin"
cat > "$pkg/DEBIAN/control" <<EOF
Package: nvidia-container-toolkit
Version: 1.0.0-hvdtest
Architecture: $arch
Maintainer: hvd-cluster tests <tests@test.invalid>
Description: stand-in: an nvidia-ctk that records its arguments
EOF
printf '#!/bin/sh\necho "$*" >> /var/log/nvidia-ctk.calls\n' > "$pkg/usr/bin/nvidia-ctk"
chmod 755 "$pkg/usr/bin/nvidia-ctk"
for who in good bad; do
  repo=/w/$who/stable/deb/$arch
  mkdir -p "$repo"
  gpg --armor --export "$who@test.invalid" > /w/$who/gpgkey
  dpkg-deb --build "$pkg" "$repo/nvidia-container-toolkit_1.0.0-hvdtest_$arch.deb" >/dev/null
  (cd "$repo" && apt-ftparchive packages . > Packages && apt-ftparchive release . > Release &&
   gpg --batch --yes --local-user "$(fpr $who)" --clearsign -o InRelease Release)
done
echo "$(fpr good) $(fpr bad)" > /w/fingerprints
chmod -R a+rX /w
"#;

/// The fixtures made in a temporary folder: `good/` and `bad/` (each a repository and the
/// `gpgkey` that signed it) and the two keys' fingerprints.
pub struct Fixtures {
    pub dir: tempfile::TempDir,
    pub good: String,
    pub bad: String,
}

impl Fixtures {
    pub fn make() -> Fixtures {
        ensure_image(Path::new(env!("CARGO_MANIFEST_DIR")));
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run(dir.path(), FIXTURES);
        assert!(out.status.success(), "fixtures: {}", text(&out.stderr));
        let fingerprints = read(&dir.path().join("fingerprints"));
        let (good, bad) = fingerprints
            .trim()
            .split_once(' ')
            .map(|(g, b)| (g.to_string(), b.to_string()))
            .expect("two fingerprints");
        assert_eq!(good.len(), 40);
        assert_ne!(good, bad);
        Fixtures { dir, good, bad }
    }

    /// The repository signed by `who` ("good" or "bad"), as a folder to serve.
    pub fn served(&self, who: &str) -> PathBuf {
        self.dir.path().join(who)
    }
}
