//! The "gpu runtime" step's plan, decided here and rendered into `templates/node/gpu.apply.sh`:
//! which driver packages a node's distribution gets (by `ID` and `VERSION_ID` of its
//! `/etc/os-release`), and NVIDIA's container-toolkit repository with the fingerprint its
//! signing key must have before the node trusts it. Pure: values in, values out.
//!
//! The script picks its distribution's plan from the table [`values`] renders (one `case`
//! branch per supported release); anything else stops with one line naming what it found.

use serde::Serialize;
use serde_json::{json, Value};

/// NVIDIA's apt repository for the container toolkit (libnvidia-container), as NVIDIA's
/// install guide names it: the key at `<repo>/gpgkey`, the packages at
/// `<repo>/stable/deb/$(ARCH) /` (one flat repository for every Debian and Ubuntu release).
pub const NVIDIA_REPO: &str = "https://nvidia.github.io/libnvidia-container";

/// The fingerprint of the primary key NVIDIA signs that repository with ("NVIDIA CORPORATION
/// (Open Source Projects) <cudatools@nvidia.com>", rsa4096, 2017-09-28), as NVIDIA's
/// maintainers show it (NVIDIA/libnvidia-container#109 and #280).
pub const NVIDIA_KEY_FINGERPRINT: &str = "C95B321B61E88C1809C4F759DDCAE044F796ECB0";

/// Where the verified key and the repository's line land on the node (the install guide's).
pub const KEYRING: &str = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg";
pub const LIST_FILE: &str = "/etc/apt/sources.list.d/nvidia-container-toolkit.list";

/// The apply script's exit code when the driver is installed but its kernel module cannot load
/// before a reboot; the script also prints a line starting with [`REBOOT_MARKER`].
pub const REBOOT_EXIT_CODE: i32 = 75;
pub const REBOOT_MARKER: &str = "hvd-cluster: reboot required:";

/// Ubuntu's server (headless, compute) driver branch, installed the way Ubuntu documents it:
/// `ubuntu-drivers install --gpgpu nvidia:<branch>-server`, plus that branch's
/// `nvidia-utils-<branch>-server` for `nvidia-smi` (the `--gpgpu` set leaves it out).
pub const UBUNTU_SERVER_BRANCH: &str = "580";

/// What the step needs from the outside: the repository and the key it must be signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolkitRepo {
    url: String,
    fingerprint: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    #[error("the container toolkit's repository `{0}`: {1}")]
    Url(String, &'static str),
    #[error("`{0}` is not an OpenPGP v4 fingerprint (40 hexadecimal digits)")]
    Fingerprint(String),
    #[error("the GPU runtime: this node runs {pretty} (ID={id} VERSION_ID={version}); GPU nodes must run {SUPPORTED_NAMES}")]
    Unsupported {
        pretty: String,
        id: String,
        version: String,
    },
}

impl ToolkitRepo {
    /// NVIDIA's own repository and key.
    pub fn nvidia() -> ToolkitRepo {
        ToolkitRepo {
            url: NVIDIA_REPO.to_string(),
            fingerprint: NVIDIA_KEY_FINGERPRINT.to_string(),
        }
    }

    /// Another repository (a mirror, or a test's stand-in). The URL must be `http(s)://` with
    /// no space, quote or `$` (it lands in an apt source line); the fingerprint is 40 hex
    /// digits, spaces allowed (as gpg prints it), compared in upper case.
    pub fn new(url: &str, fingerprint: &str) -> Result<ToolkitRepo, GpuError> {
        let url = url.trim_end_matches('/');
        let bad = |why| Err(GpuError::Url(crate::input::shown(url), why));
        let Some(rest) = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
        else {
            return bad("it must start with https:// (or http://)");
        };
        if rest.is_empty() || rest.starts_with('/') {
            return bad("it names no host");
        }
        if url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'`$\\[]#".contains(c))
        {
            return bad("it holds a space, a quote, `$`, `\\`, `[`, `]` or `#`");
        }
        let fpr: String = fingerprint
            .chars()
            .filter(|c| *c != ' ')
            .collect::<String>()
            .to_ascii_uppercase();
        if fpr.len() != 40 || !fpr.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(GpuError::Fingerprint(crate::input::shown(fingerprint)));
        }
        Ok(ToolkitRepo {
            url: url.to_string(),
            fingerprint: fpr,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    /// Where the signing key is downloaded from.
    pub fn key_url(&self) -> String {
        format!("{}/gpgkey", self.url)
    }
    /// The line of [`LIST_FILE`]: NVIDIA's published list with the keyring named, written
    /// from here rather than downloaded (a downloaded list could name other sources).
    pub fn list_line(&self) -> String {
        format!(
            "deb [signed-by={KEYRING}] {}/stable/deb/$(ARCH) /",
            self.url
        )
    }
}

/// The releases a GPU node may run, as `/etc/os-release` names them.
pub const SUPPORTED: &[(&str, &str)] = &[
    ("debian", "12"),
    ("debian", "13"),
    ("ubuntu", "22.04"),
    ("ubuntu", "24.04"),
];
const SUPPORTED_NAMES: &str = "Debian 12/13 or Ubuntu 22.04/24.04";

/// How a node gets its NVIDIA driver when `nvidia-smi -L` does not work yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverPlan {
    pub id: &'static str,
    pub version_id: &'static str,
    /// Archive components the driver needs, added to every entry of the distribution's own
    /// sources that carries `main` (deb822 and classic files alike).
    pub components: &'static [&'static str],
    /// The distribution's own source files, deb822 first; those that exist are edited.
    pub sources: &'static [&'static str],
    /// Installed with apt first (plus `linux-headers-$(uname -r)` when `kernel_headers`).
    pub packages: Vec<String>,
    pub kernel_headers: bool,
    /// Then `ubuntu-drivers install --gpgpu <this>` (empty: not used).
    pub ubuntu_driver: String,
    /// Then these, with apt.
    pub after: Vec<String>,
}

const DEBIAN_SOURCES: &[&str] = &[
    "/etc/apt/sources.list.d/debian.sources",
    "/etc/apt/sources.list",
];
const UBUNTU_SOURCES: &[&str] = &[
    "/etc/apt/sources.list.d/ubuntu.sources",
    "/etc/apt/sources.list",
];

/// The driver plan for `ID` / `VERSION_ID` (`pretty` is `PRETTY_NAME`, for the error).
pub fn driver_plan(id: &str, version_id: &str, pretty: &str) -> Result<DriverPlan, GpuError> {
    let owned = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let Some(&(id, version_id)) = SUPPORTED.iter().find(|(i, v)| *i == id && *v == version_id)
    else {
        return Err(GpuError::Unsupported {
            pretty: if pretty.is_empty() {
                "an unknown system".into()
            } else {
                crate::input::shown(pretty)
            },
            id: or_none(id),
            version: or_none(version_id),
        });
    };
    Ok(if id == "debian" {
        // Debian's non-free driver (12: 535, 13: 550), built by DKMS for the running kernel.
        // `--no-install-recommends` leaves out nvidia-smi and libcuda1: they are named.
        DriverPlan {
            id,
            version_id,
            components: &["contrib", "non-free", "non-free-firmware"],
            sources: DEBIAN_SOURCES,
            packages: owned(&[
                "nvidia-driver",
                "firmware-misc-nonfree",
                "nvidia-smi",
                "libcuda1",
                "nvidia-persistenced",
            ]),
            kernel_headers: true,
            ubuntu_driver: String::new(),
            after: vec![],
        }
    } else {
        // Ubuntu's signed, prebuilt server driver (no DKMS build).
        DriverPlan {
            id,
            version_id,
            components: &["restricted"],
            sources: UBUNTU_SOURCES,
            packages: owned(&["ubuntu-drivers-common"]),
            kernel_headers: false,
            ubuntu_driver: format!("nvidia:{UBUNTU_SERVER_BRANCH}-server"),
            after: vec![format!("nvidia-utils-{UBUNTU_SERVER_BRANCH}-server")],
        }
    })
}

/// As the script shows an empty `/etc/os-release` field.
fn or_none(field: &str) -> String {
    if field.is_empty() {
        "none".into()
    } else {
        crate::input::shown(field)
    }
}

/// Whether an apply that failed with `code` (as the SSH layer reports it) and `stderr` asks
/// for a reboot of the node rather than reporting an error.
pub fn reboot_required(code: &str, stderr: &str) -> bool {
    reboot_reason(code, stderr).is_some()
}

/// Why the apply asks for a reboot: the rest of its [`REBOOT_MARKER`] line, when it exited
/// with [`REBOOT_EXIT_CODE`]; `None` when it asks for none (both must be there: the code
/// alone could come from any command the script ran).
pub fn reboot_reason(code: &str, stderr: &str) -> Option<String> {
    if code != REBOOT_EXIT_CODE.to_string() {
        return None;
    }
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(REBOOT_MARKER))
        .map(|why| why.trim().to_string())
}

/// The values `gpu.apply.sh` is rendered with.
pub fn values(repo: &ToolkitRepo) -> Result<Value, GpuError> {
    let plans = SUPPORTED
        .iter()
        .map(|(id, v)| driver_plan(id, v, ""))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({
        "repo_url": repo.url(),
        "key_url": repo.key_url(),
        "fingerprint": repo.fingerprint(),
        "keyring": KEYRING,
        "list_file": LIST_FILE,
        "list_line": repo.list_line(),
        "plans": plans,
        "supported": SUPPORTED_NAMES,
        "reboot_exit": REBOOT_EXIT_CODE,
        "reboot_marker": REBOOT_MARKER,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_gets_non_free_and_its_own_driver() {
        for v in ["12", "13"] {
            let p = driver_plan("debian", v, "Debian").expect("supported");
            assert_eq!(p.version_id, v);
            assert_eq!(p.components, ["contrib", "non-free", "non-free-firmware"]);
            assert_eq!(p.sources[0], "/etc/apt/sources.list.d/debian.sources");
            assert_eq!(p.sources[1], "/etc/apt/sources.list");
            assert!(p.packages.iter().any(|x| x == "nvidia-driver"));
            assert!(p.packages.iter().any(|x| x == "firmware-misc-nonfree"));
            // left out by --no-install-recommends, needed by nvidia-smi -L and the containers
            assert!(p.packages.iter().any(|x| x == "nvidia-smi"));
            assert!(p.packages.iter().any(|x| x == "libcuda1"));
            assert!(p.kernel_headers);
            assert_eq!(p.ubuntu_driver, "");
            assert!(p.after.is_empty());
        }
    }

    #[test]
    fn ubuntu_gets_its_server_driver_through_ubuntu_drivers() {
        for v in ["22.04", "24.04"] {
            let p = driver_plan("ubuntu", v, "Ubuntu").expect("supported");
            assert_eq!(p.version_id, v);
            assert_eq!(p.components, ["restricted"]);
            assert_eq!(p.sources[0], "/etc/apt/sources.list.d/ubuntu.sources");
            assert_eq!(p.packages, ["ubuntu-drivers-common"]);
            assert!(!p.kernel_headers, "prebuilt modules, no DKMS");
            assert_eq!(p.ubuntu_driver, "nvidia:580-server");
            assert_eq!(p.after, ["nvidia-utils-580-server"]);
            assert!(!p.packages.iter().any(|x| x.contains("nvidia-driver")));
        }
    }

    #[test]
    fn anything_else_is_named_in_one_line() {
        for (id, v) in [
            ("debian", "11"),
            ("ubuntu", "20.04"),
            ("fedora", "40"),
            ("", ""),
        ] {
            let e = driver_plan(id, v, "Some OS").expect_err("unsupported");
            let text = e.to_string();
            let (id, v) = if id.is_empty() {
                ("none", "none")
            } else {
                (id, v)
            };
            assert!(text.contains(&format!("ID={id} VERSION_ID={v}")), "{text}");
            assert!(text.contains("GPU nodes must run Debian 12/13 or Ubuntu 22.04/24.04"));
            assert!(!text.contains('\n'));
        }
        let e = driver_plan("x", "1", "").expect_err("unsupported");
        assert!(e.to_string().contains("an unknown system"));
    }

    #[test]
    fn nvidias_repository_by_default_and_another_when_given() {
        let n = ToolkitRepo::nvidia();
        assert_eq!(
            n.key_url(),
            "https://nvidia.github.io/libnvidia-container/gpgkey"
        );
        assert_eq!(
            n.list_line(),
            "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /"
        );
        assert_eq!(n.fingerprint(), "C95B321B61E88C1809C4F759DDCAE044F796ECB0");
        let t = ToolkitRepo::new(
            "http://127.0.0.1:8080/",
            "c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0",
        )
        .expect("valid");
        assert_eq!(t.url(), "http://127.0.0.1:8080");
        assert_eq!(t.fingerprint(), NVIDIA_KEY_FINGERPRINT);
        assert_eq!(t.key_url(), "http://127.0.0.1:8080/gpgkey");
    }

    #[test]
    fn a_repository_that_could_break_the_source_line_is_refused() {
        let fpr = NVIDIA_KEY_FINGERPRINT;
        for url in [
            "ftp://example.org",
            "example.org",
            "https://",
            "https:///x",
            "https://a b",
            "https://a/$(id)",
            "https://a/[trusted=yes]",
            "https://a/'x",
            "https://a/x\n",
        ] {
            assert!(
                matches!(ToolkitRepo::new(url, fpr), Err(GpuError::Url(..))),
                "{url:?}"
            );
        }
        for f in [
            "",
            "C95B321B",
            "Z95B321B61E88C1809C4F759DDCAE044F796ECB0",
            "0x1234",
        ] {
            assert!(matches!(
                ToolkitRepo::new("https://a", f),
                Err(GpuError::Fingerprint(_))
            ));
        }
    }

    #[test]
    fn the_reboot_request_is_recognised_by_code_and_marker() {
        let line = format!("{REBOOT_MARKER} the NVIDIA kernel module does not load");
        assert!(reboot_required("75", &format!("installing x\n{line}\n")));
        assert!(!reboot_required("1", &line), "the code alone decides no");
        assert!(!reboot_required("75", "some other failure"));
        assert!(!reboot_required("75", &format!("  {line}")));
    }

    #[test]
    fn the_reboot_reason_is_the_rest_of_the_marker_line() {
        let stderr = format!(
            "apt: done\n{REBOOT_MARKER} the driver does not load in the running kernel (6.1.0-9)\n"
        );
        assert_eq!(
            reboot_reason("75", &stderr).as_deref(),
            Some("the driver does not load in the running kernel (6.1.0-9)")
        );
        assert_eq!(reboot_reason("1", &stderr), None);
        assert_eq!(reboot_reason("signal", &stderr), None);
        assert_eq!(reboot_reason("75", "E: apt failed"), None);
        assert_eq!(reboot_reason("75", REBOOT_MARKER).as_deref(), Some(""));
    }

    #[test]
    fn the_script_is_rendered_with_one_branch_per_release_and_is_valid_bash() {
        let r = crate::render::Renderer::new().expect("renderer");
        let repo = ToolkitRepo::new("http://127.0.0.1:9/x", &"AB".repeat(20)).expect("repo");
        let script = r
            .script("gpu.apply.sh", &values(&repo).expect("values"))
            .expect("rendered");
        for label in [
            "'debian':'12')",
            "'debian':'13')",
            "'ubuntu':'22.04')",
            "'ubuntu':'24.04')",
        ] {
            assert_eq!(script.matches(label).count(), 1, "{label}");
        }
        assert!(script.contains("HVD_GPU_KEY_URL='http://127.0.0.1:9/x/gpgkey'"));
        assert!(script.contains(&format!("HVD_GPU_FINGERPRINT='{}'", "AB".repeat(20))));
        assert!(script.contains("HVD_GPU_UBUNTU_DRIVER='nvidia:580-server'"));
        assert!(script.contains("exit 75"));
        assert!(!script.contains("{{") && !script.contains("{%"));
        let check = std::process::Command::new("bash")
            .args(["-n", "-c", &script])
            .output()
            .expect("bash");
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }

    #[test]
    fn the_values_carry_every_supported_plan_and_the_repository() {
        let v = values(&ToolkitRepo::nvidia()).expect("values");
        let plans = v["plans"].as_array().expect("plans");
        let named: Vec<(String, String)> = plans
            .iter()
            .map(|p| {
                (
                    p["id"].as_str().unwrap_or_default().to_string(),
                    p["version_id"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = SUPPORTED
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(named, want);
        assert_eq!(v["fingerprint"], NVIDIA_KEY_FINGERPRINT);
        assert_eq!(v["reboot_exit"], 75);
        assert_eq!(v["list_file"], LIST_FILE);
    }
}
