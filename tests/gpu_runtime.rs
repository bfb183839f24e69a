//! The "gpu runtime" step's apply script (templates/node/gpu.apply.sh, rendered by the library
//! as `up` renders it, but with a stand-in repository URL and fingerprint) on a stock Debian 12
//! (hvd-cluster/debian:bookworm, debootstrap's minbase, plus curl, gnupg and python3) in
//! containers with no network at all: the stand-in key and repository server is
//! `python3 -m http.server` on the container's own loopback. Nothing here reaches NVIDIA.
//! - the good key: its fingerprint is checked, the source line is written with `signed-by`
//!   naming a keyring that holds that key alone, and apt installs the stand-in
//!   `nvidia-container-toolkit` from the stand-in repository (signed with that key), then
//!   `nvidia-ctk runtime configure --runtime=docker` and a Docker restart;
//! - a wrong key (a stale configuration left from before): one line naming both fingerprints,
//!   exit 1, no source line and no keyring left, nothing installed, the repository never asked;
//! - no driver: Debian's `contrib non-free non-free-firmware` enabled in `debian.sources`, the
//!   driver packages asked of apt (a stand-in apt: no package is really installed), then the
//!   reboot request (exit 75 and its marker line), which the library recognises;
//! - the script's functions alone: the components added to a classic `sources.list` and to a
//!   deb822 file (and a second pass changes nothing), the plan the script picks for Debian 13
//!   and Ubuntu 22.04/24.04 equal to the library's, and an unknown system named in one line.
//!
//! Needs Docker; builds its image (seconds when cached; Debian's mirror the first time).

mod common;

use std::path::Path;
use std::process::Command;

use common::gpu_repo::{read, run, text, Fixtures, PORT};
use hvd_cluster::bootstrap::steps::gpu::{self, ToolkitRepo};
use hvd_cluster::render::Renderer;

/// Before each run: the stand-in server for `$SERVE` (good or bad) on loopback, and stand-ins
/// for what a GPU node has and a container lacks: Docker's `service` (records its calls) and,
/// with `$DRIVER = present`, an `nvidia-smi` that lists a GPU.
const PRELUDE: &str = r#"set -u
out=/w/out-$NAME; mkdir -p "$out"
(cd /w/$SERVE && exec python3 -m http.server PORT --bind 127.0.0.1 > /tmp/http.log 2>&1) &
for _ in $(seq 100); do curl -fsS -o /dev/null http://127.0.0.1:PORT/gpgkey && break; sleep 0.1; done
: > /tmp/http.log
printf '#!/bin/sh\necho "$*" >> /var/log/service.calls\n' > /usr/local/sbin/service
chmod 755 /usr/local/sbin/service
if [ "$DRIVER" = present ]; then
  printf '#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n' > /usr/local/bin/nvidia-smi
  chmod 755 /usr/local/bin/nvidia-smi
fi
"#;

/// After each run: what the script left, into /w/out-$NAME.
const COLLECT: &str = r#"
echo $rc > "$out/rc"
cp /etc/apt/sources.list.d/nvidia-container-toolkit.list "$out/list" 2>/dev/null || true
[ ! -e /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg ] || GNUPGHOME=$(mktemp -d) gpg --batch --with-colons \
  --show-keys /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg | awk -F: '$1 == "fpr" { print $10 }' > "$out/keyring"
dpkg-query -W -f='${Status} ${Version}' nvidia-container-toolkit > "$out/toolkit" 2>/dev/null || true
for f in nvidia-ctk service apt-get; do cp /var/log/$f.calls "$out/$f" 2>/dev/null || true; done
cp /tmp/http.log "$out/http"
cp /etc/apt/sources.list.d/debian.sources "$out/debian.sources" 2>/dev/null || true
uname -r > "$out/kernel"
"#;

fn scenario(work: &Path, name: &str, serve: &str, driver: &str, body: &str) -> String {
    let script = format!(
        "NAME={name} SERVE={serve} DRIVER={driver}\n{}\n{body}\n{COLLECT}",
        PRELUDE.replace("PORT", &PORT.to_string())
    );
    let out = run(work, &script);
    assert!(
        out.status.success(),
        "scenario {name}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    format!("{}/out-{name}", work.display())
}

/// The functions alone (sourced with HVD_GPU_FUNCTIONS_ONLY=1), then the whole script on an
/// unknown system.
const FUNCTIONS: &str = r#"set -u
out=/w/out-functions; mkdir -p "$out"
HVD_GPU_FUNCTIONS_ONLY=1 . /w/apply.sh
set +e
cat > "$out/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main contrib # security
# deb http://deb.debian.org/debian bookworm-backports main
deb http://deb.debian.org/debian bookworm-updates main non-free-firmware
deb https://example.org/other stable extra
EOF
cp /etc/apt/sources.list.d/debian.sources "$out/debian.sources"
hvd_gpu_plan
for pass in 1 2; do
  for f in "$out/sources.list" "$out/debian.sources"; do
    hvd_gpu_components "$f" "${HVD_GPU_COMPONENTS[@]}" 2>> "$out/components.stderr"
    cp "$f" "$f.$pass"
  done
done
plan() {
  printf 'ID=%s\nVERSION_ID=%s\nPRETTY_NAME="%s"\n' "$1" "$2" "$3" > /etc/os-release
  ( hvd_gpu_plan 2> "$out/plan-$1-$2.stderr" && echo "$1:$2 components=${HVD_GPU_COMPONENTS[*]} sources=${HVD_GPU_SOURCES[*]} packages=${HVD_GPU_PACKAGES[*]} headers=$HVD_GPU_KERNEL_HEADERS ubuntu_driver=$HVD_GPU_UBUNTU_DRIVER after=${HVD_GPU_AFTER[*]}" >> "$out/plans" )
  echo $? > "$out/plan-$1-$2.rc"
}
plan debian 12 'Debian GNU/Linux 12 (bookworm)'
plan debian 13 'Debian GNU/Linux 13 (trixie)'
plan ubuntu 22.04 'Ubuntu 22.04.5 LTS'
plan ubuntu 24.04 'Ubuntu 24.04.1 LTS'
plan fedora 40 'Fedora Linux 40 (Server Edition)'
bash /w/apply.sh > /dev/null 2> "$out/unknown.stderr"
echo $? > "$out/unknown.rc"
[ ! -e /etc/apt/sources.list.d/nvidia-container-toolkit.list ] || echo listed > "$out/unknown.list"
"#;

/// A node without the driver, as the scenarios that install it see one: apt-get and nvidia-ctk
/// record their calls (nothing is really installed), and the module does not load.
const NO_DRIVER: &str = r#"printf '#!/bin/sh\necho "$*" >> /var/log/apt-get.calls\n' > /usr/local/bin/apt-get
printf '#!/bin/sh\necho "$*" >> /var/log/nvidia-ctk.calls\n' > /usr/local/bin/nvidia-ctk
printf '#!/bin/sh\nexit 1\n' > /usr/local/sbin/modprobe
chmod 755 /usr/local/bin/apt-get /usr/local/bin/nvidia-ctk /usr/local/sbin/modprobe
"#;

#[test]
fn gpu_runtime_script_on_debian_12() {
    if !Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: tests/gpu_runtime.rs needs a running Docker engine, and `docker info` fails here");
        return;
    }
    let started = std::time::Instant::now();
    let fixtures = Fixtures::make();
    let w = fixtures.dir.path();
    let (good, bad) = (fixtures.good.as_str(), fixtures.bad.as_str());

    // Rendered as the bootstrap renders it (lib.sh first), with the stand-in's URL and the
    // good key's fingerprint in place of NVIDIA's.
    let url = format!("http://127.0.0.1:{PORT}");
    let repo = ToolkitRepo::new(&url, good).expect("repo");
    let script = Renderer::new()
        .expect("renderer")
        .script("gpu.apply.sh", &gpu::values(&repo).expect("values"))
        .expect("rendered");
    std::fs::write(w.join("apply.sh"), &script).expect("apply.sh");
    let list = format!(
        "deb [signed-by={}] {url}/stable/deb/$(ARCH) /\n",
        gpu::KEYRING
    );

    // The good key; the driver already there; Debian's own sources left out, so apt reads
    // only the stand-in repository (no network here).
    let o = scenario(
        w,
        "good",
        "good",
        "present",
        "rm /etc/apt/sources.list.d/debian.sources\nbash /w/apply.sh > $out/stdout 2> $out/stderr; rc=$?",
    );
    let o = Path::new(&o);
    let stderr = read(&o.join("stderr"));
    eprintln!("the good key's run said:\n{stderr}");
    assert_eq!(read(&o.join("rc")).trim(), "0", "{stderr}");
    assert_eq!(read(&o.join("list")), list);
    assert_eq!(
        read(&o.join("keyring")).trim(),
        good,
        "the keyring holds the good key alone"
    );
    assert_eq!(
        read(&o.join("toolkit")),
        "install ok installed 1.0.0-hvdtest"
    );
    assert_eq!(
        read(&o.join("nvidia-ctk")),
        "runtime configure --runtime=docker\n"
    );
    assert_eq!(read(&o.join("service")), "docker restart\n");
    let http = read(&o.join("http"));
    assert!(http.contains("GET /gpgkey"), "{http}");
    assert!(
        http.contains("InRelease"),
        "apt read the repository: {http}"
    );
    assert!(
        http.contains("nvidia-container-toolkit_1.0.0-hvdtest"),
        "{http}"
    );

    // A wrong key, with a configuration left from an earlier run: refused and removed.
    let o = scenario(
        w,
        "bad",
        "bad",
        "present",
        &format!(
            "rm /etc/apt/sources.list.d/debian.sources\n\
             printf '%s' '{list}' > /etc/apt/sources.list.d/nvidia-container-toolkit.list\n\
             cp /w/good/gpgkey /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg\n\
             bash /w/apply.sh > $out/stdout 2> $out/stderr; rc=$?"
        ),
    );
    let o = Path::new(&o);
    let stderr = read(&o.join("stderr"));
    assert_eq!(read(&o.join("rc")).trim(), "1", "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(&format!("is {bad}, not the expected {good}: not trusted")),
        "{stderr}"
    );
    assert_eq!(read(&o.join("list")), "", "no source line is left");
    assert!(!o.join("keyring").exists(), "no keyring is left");
    assert_eq!(read(&o.join("toolkit")), "", "nothing installed");
    assert_eq!(read(&o.join("nvidia-ctk")), "");
    assert_eq!(read(&o.join("service")), "");
    let http = read(&o.join("http"));
    assert!(http.contains("GET /gpgkey"), "{http}");
    assert!(
        !http.contains("InRelease"),
        "the repository was never asked: {http}"
    );

    // No driver: Debian's own sources get the non-free components, apt (a stand-in that
    // records its calls) is asked for the driver, and the driver cannot load: reboot.
    let o = scenario(
        w,
        "driver",
        "good",
        "missing",
        &format!(
            "{NO_DRIVER}\
         bash /w/apply.sh > $out/stdout 2> $out/stderr; rc=$?\n\
         printf '#!/bin/sh\\necho \"modprobe: ERROR: could not insert nvidia: Key was rejected by service\" >&2\\nexit 1\\n' > /usr/local/sbin/modprobe\n\
         bash /w/apply.sh > /dev/null 2> $out/stderr-sb; echo $? > $out/rc-sb"
        ),
    );
    let o = Path::new(&o);
    let stderr = read(&o.join("stderr"));
    eprintln!("the run without a driver said:\n{stderr}");
    let rc = read(&o.join("rc")).trim().to_string();
    assert_eq!(rc, gpu::REBOOT_EXIT_CODE.to_string(), "{stderr}");
    assert!(gpu::reboot_required(&rc, &stderr), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with(gpu::REBOOT_MARKER))
            .count(),
        1,
        "{stderr}"
    );
    let sources = read(&o.join("debian.sources"));
    assert_eq!(
        sources
            .matches("Components: main contrib non-free non-free-firmware\n")
            .count(),
        2,
        "both stanzas: {sources}"
    );
    let apt = read(&o.join("apt-get"));
    let kernel = read(&o.join("kernel"));
    let driver_install = format!(
        "install --no-install-recommends nvidia-driver firmware-misc-nonfree nvidia-smi libcuda1 nvidia-persistenced linux-headers-{}",
        kernel.trim()
    );
    let lines: Vec<&str> = apt.lines().collect();
    let at = |what: &str| lines.iter().position(|l| l.ends_with(what));
    let update = at(" update").expect("apt-get update after the sources changed");
    let driver = at(&driver_install).unwrap_or_else(|| panic!("{driver_install} in {apt}"));
    let toolkit = at("install --no-install-recommends nvidia-container-toolkit").expect("toolkit");
    assert!(update < driver && driver < toolkit, "{apt}");
    assert_eq!(read(&o.join("list")), list);
    assert_eq!(
        read(&o.join("nvidia-ctk")).lines().next(),
        Some("runtime configure --runtime=docker")
    );
    assert_eq!(
        read(&o.join("service")).lines().next(),
        Some("docker restart")
    );
    // Secure Boot refusing the module: a reboot would not mend it, so no reboot request
    let sb = read(&o.join("stderr-sb"));
    assert_eq!(read(&o.join("rc-sb")).trim(), "1", "{sb}");
    assert!(sb.contains("refused by Secure Boot"), "{sb}");
    assert!(!sb.contains(gpu::REBOOT_MARKER), "{sb}");

    // An image older than its archive: the running kernel's headers are gone from it (apt-cache
    // knows no such package), so the newest kernel of the running one's flavour and its
    // headers are installed, and the node reboots into it.
    let o = scenario(
        w,
        "stale-kernel",
        "good",
        "missing",
        &format!(
            "{NO_DRIVER}\
         printf '#!/bin/sh\\nexit 100\\n' > /usr/local/bin/apt-cache\n\
         printf '#!/bin/sh\\necho 6.1.0-9-cloud-amd64\\n' > /usr/local/bin/uname\n\
         chmod 755 /usr/local/bin/apt-cache /usr/local/bin/uname\n\
         bash /w/apply.sh > $out/stdout 2> $out/stderr; rc=$?"
        ),
    );
    let o = Path::new(&o);
    let stderr = read(&o.join("stderr"));
    assert_eq!(
        read(&o.join("rc")).trim(),
        gpu::REBOOT_EXIT_CODE.to_string(),
        "{stderr}"
    );
    assert!(
        stderr.contains("the archive no longer has the running kernel's headers (linux-headers-6.1.0-9-cloud-amd64): installing the newest cloud-amd64 kernel and its headers"),
        "{stderr}"
    );
    let apt = read(&o.join("apt-get"));
    assert!(
        apt.lines().any(|l| l.ends_with(
            "install --no-install-recommends nvidia-driver firmware-misc-nonfree nvidia-smi libcuda1 nvidia-persistenced linux-image-cloud-amd64 linux-headers-cloud-amd64"
        )),
        "{apt}"
    );

    functions(w);
    let secs = started.elapsed().as_secs();
    eprintln!("gpu_runtime: {secs} s");
    assert!(secs < 120, "the test must stay under 2 minutes: {secs} s");
}

fn functions(w: &Path) {
    let out = run(w, FUNCTIONS);
    assert!(out.status.success(), "functions: {}", text(&out.stderr));
    let o = w.join("out-functions");
    let classic = "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware
deb-src http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware # security
# deb http://deb.debian.org/debian bookworm-backports main
deb http://deb.debian.org/debian bookworm-updates main non-free-firmware contrib non-free
deb https://example.org/other stable extra
";
    assert_eq!(read(&o.join("sources.list.1")), classic);
    assert_eq!(
        read(&o.join("sources.list.2")),
        classic,
        "a second pass changes nothing"
    );
    let deb822 = read(&o.join("debian.sources.1"));
    assert_eq!(
        deb822
            .matches("\nComponents: main contrib non-free non-free-firmware\n")
            .count(),
        2,
        "{deb822}"
    );
    assert!(
        deb822.contains("Suites: bookworm bookworm-updates\n"),
        "{deb822}"
    );
    assert_eq!(read(&o.join("debian.sources.2")), deb822);
    let said = read(&o.join("components.stderr"));
    assert_eq!(
        said.lines().count(),
        2,
        "one line per file changed, once: {said}"
    );

    // The plan the script picks is the library's.
    let plans = read(&o.join("plans"));
    for (id, v) in gpu::SUPPORTED {
        let p = gpu::driver_plan(id, v, "").expect("supported");
        let want = format!(
            "{id}:{v} components={} sources={} packages={} headers={} ubuntu_driver={} after={}",
            p.components.join(" "),
            p.sources.join(" "),
            p.packages.join(" "),
            u8::from(p.kernel_headers),
            p.ubuntu_driver,
            p.after.join(" ")
        );
        assert!(plans.lines().any(|l| l == want), "{want}\nnot in\n{plans}");
        assert_eq!(read(&o.join(format!("plan-{id}-{v}.rc"))).trim(), "0");
    }
    assert_eq!(read(&o.join("plan-fedora-40.rc")).trim(), "1");
    let unknown = read(&o.join("plan-fedora-40.stderr"));
    // the library's words, which the script prints for a system it does not know
    let words = gpu::driver_plan("fedora", "40", "Fedora Linux 40 (Server Edition)")
        .expect_err("unsupported")
        .to_string();
    assert_eq!(unknown, format!("hvd-cluster: {words}\n"));
    assert!(
        words.contains("runs Fedora Linux 40 (Server Edition) (ID=fedora VERSION_ID=40)"),
        "{words}"
    );
    // the whole script stops there: one line, nothing configured
    assert_eq!(read(&o.join("unknown.rc")).trim(), "1");
    assert_eq!(read(&o.join("unknown.stderr")), unknown);
    assert!(!o.join("unknown.list").exists());
}
