//! The local provider's images, built from Debian packages and PyPI (no registry is needed):
//! a debootstrapped Debian base, the node image (what a cloud VM looks like) and the Horovod
//! image. The recipe (Dockerfiles, entrypoints, the build script) is compiled into the binary,
//! written to a cache folder and run; every image carries a hash of its inputs, so a second
//! build of an unchanged recipe takes a second.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::progress::Progress;

/// Image names the build produces (see `scripts/build-images`).
pub const BASE_IMAGE: &str = "hvd-cluster/debian:bookworm";
/// What a cloud VM looks like: the local provider's nodes run it.
pub const NODE_IMAGE: &str = "hvd-cluster/node:bookworm";
pub const HOROVOD_IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-hvd0.28.1";
/// The same with Debian's Open MPI, horovod built for Gloo and MPI.
pub const HOROVOD_MPI_IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-hvd0.28.1-mpi";
/// Debian's PyTorch 1.13.1 (CPU), Gloo and Open MPI, no TensorFlow: one image for
/// `horovodrun --gloo` and `--mpi` (profiles/local-pytorch.toml).
pub const HOROVOD_TORCH_IMAGE: &str = "hvd-cluster/horovod:pt1.13.1-hvd0.28.1-mpi";
/// The CUDA build of both frameworks for GPU nodes (templates/images/horovod-cuda/): PyPI's
/// tensorflow and torch (cu117 wheel) on PyPI's CUDA 11.8 libraries, horovod with NCCL, Gloo
/// and Open MPI (profiles/science-cloud.toml).
pub const HOROVOD_CUDA_IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-pt1.13.1-hvd0.28.1-mpi-cu118";

/// Every Horovod image the shipped recipe builds (`container.source = "build-remote"` builds
/// only these on the master).
pub const RECIPE_IMAGES: &[&str] = &[
    HOROVOD_IMAGE,
    HOROVOD_MPI_IMAGE,
    HOROVOD_TORCH_IMAGE,
    HOROVOD_CUDA_IMAGE,
];

/// Who brings what the cluster needs inside the Horovod container (sshd on the Horovod port,
/// the cluster's keys, Jupyter Lab on the master).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    /// One of our images: its own entrypoint does it.
    Image,
    /// Any other image (a user's own): the tool brings it from outside the image, made on
    /// each node from the node's own OpenSSH (templates/node/runtime.apply.sh).
    Tool,
}

/// The runtime `image` runs with: ours carry theirs, every other image gets the tool's. Pure.
pub fn runtime_for(image: &str) -> ContainerRuntime {
    if RECIPE_IMAGES.contains(&image) {
        ContainerRuntime::Image
    } else {
        ContainerRuntime::Tool
    }
}

/// One of the recipe's images built without CUDA: on a node with GPUs it trains on its CPUs.
fn is_cpu_build(image: &str) -> bool {
    RECIPE_IMAGES.contains(&image) && !build_env(image).contains(&("HVD_CUDA", "1"))
}

/// The warning for a cluster whose nodes have GPUs (`master_gpus`, `worker_gpus` each of
/// `workers`) while its image is one of our CPU builds; none for any other image, whose build
/// we do not know. Pure.
pub fn cpu_build_on_gpus(
    image: &str,
    master_gpus: u32,
    worker_gpus: u32,
    workers: u32,
) -> Option<String> {
    if !is_cpu_build(image) {
        return None;
    }
    let workers_have = worker_gpus > 0 && workers > 0;
    let who = match (master_gpus > 0, workers_have) {
        (false, false) => return None,
        (true, false) => format!("the master has {master_gpus} GPU(s)"),
        (false, true) => format!("the workers have {worker_gpus} GPU(s) each"),
        (true, true) => {
            format!("the master has {master_gpus} GPU(s) and every worker {worker_gpus}")
        }
    };
    Some(format!(
        "{who} but image {image} is a CPU build: training runs on CPU; use {HOROVOD_CUDA_IMAGE} (container.image)"
    ))
}

/// The environment under which `scripts/build-images` builds `image`, for the tags it knows;
/// any other name builds the default image (as before variants existed). The switches are set
/// here only: [`ensure`] drops [`VARIANT_SWITCHES`] from its own environment first.
pub fn build_env(image: &str) -> &'static [(&'static str, &'static str)] {
    match image {
        HOROVOD_MPI_IMAGE => &[("HOROVOD_WITH_MPI", "1")],
        HOROVOD_TORCH_IMAGE => &[
            ("HOROVOD_WITH_MPI", "1"),
            ("HVD_WITH_TORCH", "1"),
            ("HVD_WITH_TF", "0"),
        ],
        HOROVOD_CUDA_IMAGE => &[
            ("HOROVOD_WITH_MPI", "1"),
            ("HVD_WITH_TORCH", "1"),
            ("HVD_CUDA", "1"),
        ],
        _ => &[],
    }
}

/// scripts/build-images' variant switches: a value left in the user's shell would build
/// another image than the profile's under that image's name.
pub(crate) const VARIANT_SWITCHES: &[&str] = &[
    "HOROVOD_WITH_MPI",
    "HVD_WITH_TORCH",
    "HVD_WITH_TF",
    "HVD_CUDA",
];

const BUILD_SCRIPT: &str = include_str!("../scripts/build-images");

/// (path under templates/images, text) of every file of the image recipes.
const RECIPE: &[(&str, &str)] = &[
    (
        "base/apt-container.conf",
        include_str!("../templates/images/base/apt-container.conf"),
    ),
    (
        "base/debian.sources",
        include_str!("../templates/images/base/debian.sources"),
    ),
    (
        "base/dpkg-excludes",
        include_str!("../templates/images/base/dpkg-excludes"),
    ),
    (
        "base/policy-rc.d",
        include_str!("../templates/images/base/policy-rc.d"),
    ),
    (
        "base/setup.sh",
        include_str!("../templates/images/base/setup.sh"),
    ),
    (
        "horovod/Dockerfile",
        include_str!("../templates/images/horovod/Dockerfile"),
    ),
    (
        "horovod/constraints.txt",
        include_str!("../templates/images/horovod/constraints.txt"),
    ),
    (
        "horovod/entrypoint.sh",
        include_str!("../templates/images/horovod/entrypoint.sh"),
    ),
    (
        "horovod/horovod-project.cmake",
        include_str!("../templates/images/horovod/horovod-project.cmake"),
    ),
    (
        "horovod/horovod-toolchain.cmake",
        include_str!("../templates/images/horovod/horovod-toolchain.cmake"),
    ),
    (
        "horovod/jupyter_server_config.py",
        include_str!("../templates/images/horovod/jupyter_server_config.py"),
    ),
    (
        "horovod/sshd_config",
        include_str!("../templates/images/horovod/sshd_config"),
    ),
    (
        "horovod-build/Dockerfile",
        include_str!("../templates/images/horovod-build/Dockerfile"),
    ),
    (
        "horovod-cuda/Dockerfile",
        include_str!("../templates/images/horovod-cuda/Dockerfile"),
    ),
    (
        "horovod-cuda/check-image.sh",
        include_str!("../templates/images/horovod-cuda/check-image.sh"),
    ),
    (
        "horovod-cuda/cuda-requirements.txt",
        include_str!("../templates/images/horovod-cuda/cuda-requirements.txt"),
    ),
    (
        "node/cloud-init.cfg",
        include_str!("../templates/images/node/cloud-init.cfg"),
    ),
    (
        "node/Dockerfile",
        include_str!("../templates/images/node/Dockerfile"),
    ),
    (
        "node/entrypoint.sh",
        include_str!("../templates/images/node/entrypoint.sh"),
    ),
    (
        "node/ganesha.conf.tmpl",
        include_str!("../templates/images/node/ganesha.conf.tmpl"),
    ),
    (
        "node/nfs-export.sh",
        include_str!("../templates/images/node/nfs-export.sh"),
    ),
    (
        "node/sshd_config",
        include_str!("../templates/images/node/sshd_config"),
    ),
];

/// The build script's path inside the recipe folder.
pub const BUILD_SCRIPT_PATH: &str = "scripts/build-images";

/// One file of the recipe as it is laid out for `scripts/build-images` (`templates/images/...`
/// beside `scripts/build-images`).
#[derive(Debug, Clone)]
pub struct RecipeFile {
    pub path: String,
    pub text: &'static str,
    pub executable: bool,
}

/// The whole recipe: every image file and the build script. What `up` writes to build here,
/// and what `container.source = "build-remote"` sends to the master.
pub fn recipe_files() -> impl Iterator<Item = RecipeFile> {
    RECIPE
        .iter()
        .map(|(rel, text)| RecipeFile {
            path: format!("templates/images/{rel}"),
            text,
            executable: rel.ends_with(".sh") || rel.ends_with("policy-rc.d"),
        })
        .chain(std::iter::once(RecipeFile {
            path: BUILD_SCRIPT_PATH.to_string(),
            text: BUILD_SCRIPT,
            executable: true,
        }))
}

/// Whether a line of `scripts/build-images` is one to show: every step, and every 30 s
/// heartbeat of a long step, so that an image build (minutes the first time) is never silent.
pub fn is_step_line(line: &str) -> bool {
    line.contains("built ")
        || line.contains("up to date")
        || line.contains("debootstrap")
        || line.contains("still running")
        || line.contains("mirrors:")
        || line.trim_start().starts_with('[')
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot prepare the image recipe in {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("building the images failed (exit {code}); last lines:\n{tail}")]
    Build { code: String, tail: String },
    /// Bad input (exit 2): the mirror named by the environment.
    #[error("HVD_CLUSTER_APT_MIRROR: {0}")]
    Mirror(String),
}

/// The environment variable naming the Debian mirror the images are built from (default: the
/// one this machine's apt sources name, else deb.debian.org; see `scripts/build-images`).
pub const MIRROR_VAR: &str = "HVD_CLUSTER_APT_MIRROR";

/// One field of an image on this machine's Docker engine (`docker image inspect -f FORMAT`),
/// if the image is there.
async fn inspect_local_image(image: &str, format: &str) -> Option<String> {
    let out = tokio::process::Command::new("docker")
        .args(["image", "inspect", "-f", format, image])
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A shell substitution a node runs for IMAGE's id in its Docker engine: empty when the image
/// (or the engine) is not there. The reference is quoted.
pub fn node_image_id(image: &str) -> String {
    format!(
        "$(docker image inspect -f '{{{{.Id}}}}' {} 2>/dev/null)",
        crate::ssh::shell_quote(image)
    )
}

/// The id of an image on this machine's Docker engine, if it is there.
pub async fn local_image_id(image: &str) -> Option<String> {
    inspect_local_image(image, "{{.Id}}").await
}

/// The size (bytes, unpacked) of an image on this machine's Docker engine, if it is there.
pub async fn local_image_bytes(image: &str) -> Option<u64> {
    inspect_local_image(image, "{{.Size}}").await?.parse().ok()
}

/// The mirror named by [`MIRROR_VAR`], checked by its grammar (bad input: exit 2).
pub fn mirror_from_env() -> Result<Option<String>, ImageError> {
    match std::env::var(MIRROR_VAR) {
        Ok(m) if !m.is_empty() => {
            crate::input::check_apt_mirror(&m).map_err(|e| ImageError::Mirror(e.0))?;
            Ok(Some(m))
        }
        Ok(_) => Ok(None),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(ImageError::Mirror("the value is not valid UTF-8".into()))
        }
    }
}

/// Builds whatever of base, node and Horovod image is missing or out of date, showing the
/// build's steps. `cache` holds the unpacked recipe; `image` is the profile's Horovod image
/// (its variant is built, see [`build_env`]).
pub async fn ensure(
    cache: &Path,
    targets: &[&str],
    image: &str,
    progress: &Progress,
) -> Result<(), ImageError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ImageError::Io { path, source }
    };
    let mirror = mirror_from_env()?;
    let root = cache.join("recipe");
    for file in recipe_files() {
        let path = root.join(&file.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        std::fs::write(&path, file.text).map_err(io(&path))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&path))?;
        }
    }
    let script = root.join(BUILD_SCRIPT_PATH);

    let spinner = progress.spinner("images");
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(&script)
        .args(targets)
        .env("LOG_DIR", cache.join("logs"))
        // only our own variable names the mirror; a stray MIRROR in the user's shell does not
        .env_remove("MIRROR")
        .env_remove("SECURITY_MIRROR");
    for switch in VARIANT_SWITCHES {
        command.env_remove(switch);
    }
    command.envs(build_env(image).iter().copied());
    if let Some(m) = &mirror {
        command.env(MIRROR_VAR, m);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(&script))?;
    let mut tail: Vec<String> = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            // Every step and every 30 s heartbeat of a long step is a line: an image build
            // (minutes the first time) is never silent.
            if is_step_line(&line) {
                progress.line(format!("  {}", line.trim()));
            }
            spinner.set_message(line.trim().to_string());
            tail.push(line);
            if tail.len() > 30 {
                tail.remove(0);
            }
        }
    }
    let output = child.wait_with_output().await.map_err(io(&script))?;
    spinner.finish_and_clear();
    if !output.status.success() {
        tail.extend(
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .map(str::to_string),
        );
        let n = tail.len();
        return Err(ImageError::Build {
            code: output
                .status
                .code()
                .map_or("signal".into(), |c| c.to_string()),
            tail: tail[n.saturating_sub(20)..].join("\n"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Every variant's environment gives the tag scripts/build-images names it by.
    #[test]
    fn variants_build_under_the_environment_that_names_their_tag() {
        let tag = |env: &[(&str, &str)]| {
            let on = |k: &str| env.iter().any(|(key, v)| *key == k && *v == "1");
            let off = |k: &str| env.iter().any(|(key, v)| *key == k && *v == "0");
            format!(
                "hvd-cluster/horovod:{}{}-hvd0.28.1{}{}",
                if off("HVD_WITH_TF") { "" } else { "tf2.12.1" },
                if on("HVD_WITH_TORCH") && off("HVD_WITH_TF") {
                    "pt1.13.1"
                } else if on("HVD_WITH_TORCH") {
                    "-pt1.13.1"
                } else {
                    ""
                },
                if on("HOROVOD_WITH_MPI") { "-mpi" } else { "" },
                if on("HVD_CUDA") { "-cu118" } else { "" }
            )
        };
        for image in [
            super::HOROVOD_IMAGE,
            super::HOROVOD_MPI_IMAGE,
            super::HOROVOD_TORCH_IMAGE,
            super::HOROVOD_CUDA_IMAGE,
        ] {
            assert_eq!(tag(super::build_env(image)), image);
            for (key, _) in super::build_env(image) {
                assert!(super::VARIANT_SWITCHES.contains(key), "{key}");
            }
        }
        assert!(super::BUILD_SCRIPT.contains("TORCH_TAG=-pt1.13.1"));
        assert!(super::BUILD_SCRIPT.contains(r#"HVD_TAG=${TORCH_TAG#-}-hvd$HVD_VERSION"#));
        assert!(super::BUILD_SCRIPT.contains("HVD_TAG=$HVD_TAG-cu118"));
        assert!(super::build_env("someone/else:latest").is_empty());
    }

    /// GPUs with one of our CPU builds: a warning naming the CUDA image; nothing without GPUs,
    /// with the CUDA image, or with an image we did not build.
    #[test]
    fn a_cpu_build_on_gpu_nodes_is_named_with_the_cuda_image() {
        use super::{cpu_build_on_gpus, HOROVOD_CUDA_IMAGE, HOROVOD_IMAGE, HOROVOD_TORCH_IMAGE};
        let w = cpu_build_on_gpus(HOROVOD_TORCH_IMAGE, 0, 2, 4).expect("a warning");
        assert_eq!(
            w,
            format!("the workers have 2 GPU(s) each but image {HOROVOD_TORCH_IMAGE} is a CPU build: training runs on CPU; use {HOROVOD_CUDA_IMAGE} (container.image)")
        );
        let w = cpu_build_on_gpus(HOROVOD_IMAGE, 1, 0, 4).expect("a warning");
        assert!(w.starts_with("the master has 1 GPU(s) but image"), "{w}");
        let w = cpu_build_on_gpus(HOROVOD_IMAGE, 1, 4, 2).expect("a warning");
        assert!(
            w.starts_with("the master has 1 GPU(s) and every worker 4 but"),
            "{w}"
        );
        assert_eq!(cpu_build_on_gpus(HOROVOD_IMAGE, 0, 0, 4), None);
        assert_eq!(cpu_build_on_gpus(HOROVOD_IMAGE, 0, 2, 0), None);
        assert_eq!(cpu_build_on_gpus(HOROVOD_CUDA_IMAGE, 2, 2, 4), None);
        assert_eq!(
            cpu_build_on_gpus("registry.example/lab/horovod:gpu", 2, 2, 4),
            None
        );
    }

    /// A file added to templates/images but not to RECIPE would be missing from the build
    /// context of the binary's own image builds.
    #[test]
    fn recipe_lists_every_image_file() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/images");
        let mut on_disk = Vec::new();
        for dir in std::fs::read_dir(&root).unwrap() {
            let dir = dir.unwrap().path();
            for file in std::fs::read_dir(&dir).unwrap() {
                let file = file.unwrap().path();
                on_disk.push(
                    file.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = super::RECIPE.iter().map(|(p, _)| p.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}
